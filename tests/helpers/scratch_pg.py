"""A Postgres server of one test's own (a second embedded pgserver in the test's temp
dir), for what must not happen to the session's shared server: restarting it with its own
``pg_ctl restart -m fast`` while clients and CLI processes use it."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import psycopg


class ScratchPostgres:
    """An embedded Postgres in a temp folder of its own (started at once; :meth:`stop`
    stops and removes it). ``url`` is its URL (a Unix socket, trust authentication);
    :attr:`socket_dir` the socket's folder."""

    def __init__(self) -> None:
        import pgserver

        self._root = Path(tempfile.mkdtemp(prefix="cyclone-scratch-pg-"))
        self.pgdata = self._root / "pgdata"
        self._server = pgserver.get_server(self.pgdata, cleanup_mode="stop")
        self.url: str = self._server.get_uri()
        info = psycopg.conninfo.conninfo_to_dict(self.url)
        self.socket_dir = str(info.get("host") or "")
        self.port = int(info.get("port") or 5432)

    def restart(self) -> float:
        """``pg_ctl restart -m fast``: every session is terminated (57P01), the server
        is down for a moment and comes back; returns once it accepts connections again,
        with the seconds that took."""
        from pgserver import _commands

        started = time.monotonic()
        _commands.pg_ctl(
            ["-w", "-m", "fast", "restart"], pgdata=self.pgdata, user=self._server.system_user
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.url, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return time.monotonic() - started
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server and remove its folder (again: a no-op)."""
        if not self._root.exists():
            return
        try:
            self._server.cleanup()
            if (Path(self.pgdata) / "postmaster.pid").exists():
                # restarted by pg_ctl: pgserver's cleanup knew only the first postmaster
                from pgserver import _commands

                _commands.pg_ctl(
                    ["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self._server.system_user
                )
        finally:
            shutil.rmtree(self._root, ignore_errors=True)

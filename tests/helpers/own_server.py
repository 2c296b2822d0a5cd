"""An embedded Postgres of a test's own (pgserver in a temp dir), for tests that restart
the server or change database-wide settings: the session's shared server is never
disturbed. :func:`own_server` yields an :class:`OwnServer`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg


class OwnServer:
    """A running embedded server: :attr:`uri` (of database ``postgres``), :meth:`uri_of`
    another database, :meth:`restart` (``pg_ctl restart -m fast``: every session is
    terminated, the server is back when it returns), :meth:`stop` (for good)."""

    def __init__(self, server: Any) -> None:
        self._server = server
        self.uri: str = server.get_uri()
        self.restarts = 0

    def uri_of(self, database: str) -> str:
        """The URI of ``database`` on this server."""
        return str(self._server.get_uri(database))

    def restart(self) -> None:
        """``pg_ctl restart -m fast`` and wait until the server accepts connections."""
        from pgserver._commands import pg_ctl

        pg_ctl(
            ["-w", "-m", "fast", "-l", str(self._server.log), "restart"],
            pgdata=self._server.pgdata,
            user=self._server.system_user,
            timeout=60,
        )
        self.restarts += 1

    def stop(self) -> None:
        """Stop the server (again: a no-op). pgserver's cleanup knows only the first
        postmaster, so one that :meth:`restart` started is stopped with ``pg_ctl``."""
        self._server.cleanup()
        if (Path(self._server.pgdata) / "postmaster.pid").exists():
            from pgserver._commands import pg_ctl

            pg_ctl(
                ["-w", "-m", "fast", "stop"],
                pgdata=self._server.pgdata,
                user=self._server.system_user,
            )

    def create_database(self, name: str) -> str:
        """``CREATE DATABASE name``; returns its URI."""
        with psycopg.connect(self.uri, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.uri_of(name)


@contextmanager
def own_server(directory: Path) -> Iterator[OwnServer]:
    """Start an embedded server with its data in ``directory`` (a fresh one), stopped
    when the block ends."""
    import pgserver

    server = OwnServer(pgserver.get_server(directory / "pgdata", cleanup_mode="stop"))
    try:
        yield server
    finally:
        server.stop()

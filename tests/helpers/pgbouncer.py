"""A real PgBouncer (the system's ``pgbouncer``, 1.18+ from Debian) in front of a Postgres,
started by a test: its ini and userlist in a temp folder, listening on a free port of
127.0.0.1, ``auth_type = trust``, pooling in the mode asked (transaction by default)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

REQUIRE_ENV = "CYCLONE_REQUIRE_PGBOUNCER"
"""Set (to 1) by ``.ci/run``, which installs pgbouncer: then a missing pgbouncer fails
the test instead of skipping it."""


def pgbouncer_binary() -> str | None:
    """The path of ``pgbouncer`` (on PATH or in /usr/sbin, where Debian puts it)."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PgBouncer:
    """PgBouncer forwarding every database of the server at ``upstream_url`` (its host may
    be a Unix socket folder), ``pool_mode`` pooling, at most ``pool_size`` server
    connections per database and user. :attr:`url` is the URL of ``dbname`` through it;
    :meth:`stop` ends it."""

    def __init__(
        self, upstream_url: str, *, pool_mode: str = "transaction", pool_size: int = 4
    ) -> None:
        binary = pgbouncer_binary()
        assert binary is not None, "pgbouncer is not installed"
        info = psycopg.conninfo.conninfo_to_dict(upstream_url)
        user = str(info.get("user") or "postgres")
        dbname = str(info.get("dbname") or user)
        host = str(info.get("host") or "/tmp")
        upstream_port = str(info.get("port") or 5432)
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="cyclone-pgbouncer-"))
        self.dir.chmod(0o755)
        ini = self.dir / "pgbouncer.ini"
        userlist = self.dir / "userlist.txt"
        userlist.write_text(f'"{user}" ""\n', encoding="utf-8")
        ini.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={host} port={upstream_port}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    f"unix_socket_dir = {self.dir}",
                    "auth_type = trust",
                    f"auth_file = {userlist}",
                    f"pool_mode = {pool_mode}",
                    f"default_pool_size = {pool_size}",
                    "max_client_conn = 500",
                    f"logfile = {self.dir / 'pgbouncer.log'}",
                    f"pidfile = {self.dir / 'pgbouncer.pid'}",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        for path in (ini, userlist):
            path.chmod(0o644)
        args = [binary]
        if os.geteuid() == 0:  # pgbouncer refuses to run as root: it drops to this user
            import pwd

            run_as = pwd.getpwnam("pgserver" if _user_exists("pgserver") else "nobody")
            os.chown(self.dir, run_as.pw_uid, run_as.pw_gid)  # its log and pid file
            args += ["-u", run_as.pw_name]
        with open(self.dir / "stderr.log", "wb") as err:
            self._proc = subprocess.Popen([*args, str(ini)], stdout=subprocess.DEVNULL, stderr=err)
        self.url = f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            if self._proc.poll() is not None:
                raise AssertionError(f"pgbouncer exited {self._proc.returncode}:\n{self.log()}")
            try:
                with psycopg.connect(self.url, connect_timeout=2, prepare_threshold=None) as c:
                    c.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def version(self) -> str:
        """``pgbouncer --version``'s first line, e.g. ``PgBouncer 1.18.0``."""
        binary = pgbouncer_binary()
        assert binary is not None
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
        return out.stdout.splitlines()[0].strip()

    def log(self) -> str:
        """What pgbouncer logged so far (its log file, then its stderr)."""
        paths = (self.dir / "pgbouncer.log", self.dir / "stderr.log")
        return "".join(p.read_text(errors="replace") for p in paths if p.exists())

    def stop(self) -> None:
        """Stop pgbouncer (its server connections close) and remove its folder."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@contextmanager
def transaction_pooler(database_url: str, pool_size: int = 3) -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode in front of ``database_url`` with ``pool_size`` server
    connections, stopped on leaving (before the test's schema goes back to the pool, so no
    server connection outlives it). Skips the test when pgbouncer is not installed, fails it
    instead when :data:`REQUIRE_ENV` is set (.ci/run)."""
    if pgbouncer_binary() is None:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"pgbouncer is not installed and {REQUIRE_ENV} is set (.ci/run)")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer); .ci/run has it")
    bouncer = PgBouncer(database_url, pool_mode="transaction", pool_size=pool_size)
    try:
        yield bouncer
    finally:
        bouncer.stop()

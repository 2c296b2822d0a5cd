"""A throwaway cluster of the system's packaged PostgreSQL (Debian's ``postgresql``, in
``/usr/lib/postgresql/<major>/bin``), with JIT on as the distribution ships it: the
embedded server (pgserver) is built without LLVM, so a statement that a JIT-enabled
server compiles (a JIT-compiled limited claim can spend seconds in JIT) is seen only here.

:class:`DebianCluster` initdb's a cluster in a temp folder, starts it on a Unix socket in
that folder (a free port number, no TCP), as the ``postgres`` system user when the suite
runs as root (the server refuses root), and checks that JIT is available and on.
:meth:`DebianCluster.explaining_url` and :meth:`DebianCluster.plans_logged` give the
``EXPLAIN (ANALYZE, FORMAT JSON)`` of every statement that sessions of that URL ran
(``auto_explain``), to see which were JIT-compiled (their plan has a ``"JIT"`` key)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

REQUIRE_ENV = "CYCLONE_REQUIRE_DEBIAN_PG"
"""Set (to 1) by ``.ci/run``, which installs Debian's ``postgresql``: then a missing
server fails the tests that need it instead of skipping them."""

# The cluster's settings: JIT as Debian ships it (on, thresholds at their defaults, said
# again so that a changed default of a later release does not hide a JIT), fsync off (a
# throwaway cluster; the tests measure no durability), room for the suite's clients.
SETTINGS = {
    "jit": "on",
    "jit_above_cost": "100000",
    "jit_inline_above_cost": "500000",
    "jit_optimize_above_cost": "500000",
    "max_connections": "200",
    "fsync": "off",
    "listen_addresses": "",
}


# A session's options that log the EXPLAIN (ANALYZE, FORMAT JSON) of each statement it
# runs, those run inside functions included (auto_explain: superuser settings, which the
# cluster's trust authentication as ``postgres`` allows at connection start).
AUTO_EXPLAIN = " ".join(
    f"-c {k}={v}"
    for k, v in {
        "session_preload_libraries": "auto_explain",
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_analyze": "on",
        "auto_explain.log_timing": "off",
        "auto_explain.log_format": "json",
        "auto_explain.log_nested_statements": "on",
    }.items()
)


@dataclass(frozen=True)
class LoggedPlan:
    """One statement's plan as auto_explain logged it: ``query`` (its text as sent,
    placeholders ``$n``) and ``plan``, the JSON document of ``EXPLAIN (ANALYZE, FORMAT
    JSON)`` (keys ``"Query Text"``, ``"Plan"``, and ``"JIT"`` when it was compiled)."""

    query: str
    plan: dict[str, Any]

    @property
    def jit(self) -> bool:
        """Whether the statement was JIT-compiled."""
        return "JIT" in self.plan


def parse_plans(log: str) -> list[LoggedPlan]:
    """The plans auto_explain wrote in ``log`` (the server's stderr log: a ``plan:`` line,
    then the JSON document on lines that start with a tab)."""
    plans: list[LoggedPlan] = []
    lines = log.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].endswith("  plan:"):
            j = i + 1
            while j < len(lines) and lines[j].startswith("\t"):
                j += 1
            doc = json.loads("\n".join(line[1:] for line in lines[i + 1 : j]))
            plans.append(LoggedPlan(doc.get("Query Text", ""), doc))
            i = j
        else:
            i += 1
    return plans


def debian_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<major>/bin`` that has ``postgres`` and whose
    ``lib`` has the JIT provider (``llvmjit.so``), or None."""
    found = []
    for folder in Path("/usr/lib/postgresql").glob("*/bin"):
        if (folder / "postgres").exists() and (folder.parent / "lib" / "llvmjit.so").exists():
            major = folder.parent.name
            found.append((int(major) if major.isdigit() else 0, folder))
    return max(found)[1] if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class DebianCluster:
    """A running cluster of Debian's PostgreSQL: :attr:`url` (database ``postgres``, user
    ``postgres``, trust authentication), :attr:`version` (``server_version``),
    :meth:`stop` (stops it and removes its folder). ``settings`` override
    :data:`SETTINGS`. Raises AssertionError when the server is not installed or does not
    start (with its log)."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        binaries = debian_bin()
        assert binaries is not None, "Debian's postgresql (with llvmjit.so) is not installed"
        self._bin = binaries
        self.dir = Path(tempfile.mkdtemp(prefix="cyclone-debian-pg-"))
        self.dir.chmod(0o755)
        self.pgdata = self.dir / "pgdata"
        self.log = self.dir / "server.log"
        self.port = _free_port()
        self._user: dict[str, Any] = {}
        if os.geteuid() == 0:  # postgres refuses root: initdb and run as its system user
            import pwd

            entry = pwd.getpwnam("postgres")
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
            self._user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        self._run(
            "initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync",
        )  # fmt: skip
        conf = {**SETTINGS, **(settings or {}), "port": str(self.port)}
        lines = [f"{k} = '{v}'" for k, v in conf.items()]
        lines.append(f"unix_socket_directories = '{self.dir}'")
        with (self.pgdata / "postgresql.conf").open("a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        try:
            self._pg_ctl("-l", str(self.log), "-w", "-t", "60", "start")
        except AssertionError:
            self.stop()
            raise
        self.url = f"postgresql://postgres@/postgres?host={self.dir}&port={self.port}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute("SELECT current_setting('server_version'), pg_jit_available()")
            version, available = row.fetchone() or ("", False)
        self.version: str = version
        self.jit_available: bool = available

    def explaining_url(self) -> str:
        """:attr:`url` with :data:`AUTO_EXPLAIN`: its sessions log every plan."""
        return psycopg.conninfo.make_conninfo(self.url, options=AUTO_EXPLAIN)

    @contextlib.contextmanager
    def plans_logged(self) -> Iterator[list[LoggedPlan]]:
        """The plans the server logged during the block (of the sessions of
        :meth:`explaining_url`), in the list yielded, filled when the block ends."""
        start = self.log.stat().st_size
        plans: list[LoggedPlan] = []
        yield plans
        with self.log.open("rb") as f:
            f.seek(start)
            plans.extend(parse_plans(f.read().decode("utf-8", "replace")))

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            [str(self._bin / program), *args], capture_output=True, text=True, **self._user
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise AssertionError(f"{program} exited {done.returncode}:\n{done.stderr}\n{log}")

    def _pg_ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self.pgdata), *args)

    def stop(self) -> None:
        """Stop the server (``pg_ctl stop -m immediate``: a throwaway cluster) and remove
        its folder."""
        if (self.pgdata / "postmaster.pid").exists():
            with contextlib.suppress(AssertionError):
                self._pg_ctl("-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    """``PYTHONPATH=tests python -m helpers.debian_pg``: start a cluster with durability
    on (fsync on, for the benchmarks: ``python -m benchmarks --database-url URL``), print
    its URL, stop it at Ctrl-C or SIGTERM."""
    import signal

    cluster = DebianCluster({"fsync": "on"})
    try:
        print(f"{cluster.url}  ({cluster.version}, JIT available: {cluster.jit_available})")
        print("Ctrl-C stops it", flush=True)
        signal.signal(signal.SIGTERM, _interrupt)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()

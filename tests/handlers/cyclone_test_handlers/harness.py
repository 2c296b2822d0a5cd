"""Test helpers shared by tests/integration and tests/chaos (importable from both because
conftest puts tests/handlers on sys.path): a deadline poller, the ledger business table,
and real ``cyclone-flow worker`` subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[3]
HANDLERS_PATH = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).parent / "cyclone-flow"

LEDGER_DDL = """
CREATE TABLE ledger (
    id      bigserial   PRIMARY KEY,
    run_id  uuid        NOT NULL,
    node    text        NOT NULL,
    tag     text        NOT NULL,
    pid     integer     NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def wait_until(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> T:
    """Poll ``predicate`` until it returns a truthy value and return that value; fail the
    test with ``what`` when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what or predicate}")
        time.sleep(interval)


def step_row(db: Any, run_id: str, node: str = "s") -> dict[str, Any]:
    """The ``cyclone_steps`` row of ``(run_id, node)`` as a dict, plus the database's
    ``now()`` as ``db_now`` (``db``'s search_path is the test schema)."""
    import psycopg.rows

    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    row = cur.execute(
        "SELECT *, now() AS db_now FROM cyclone_steps WHERE run_id = %s AND node = %s",
        (run_id, node),
    ).fetchone()
    assert row is not None, f"no step {node} in run {run_id}"
    return dict(row)


def create_ledger(db: Any) -> None:
    """Create the ledger table in the schema of ``db`` (its search_path). Deliberately no
    unique key: a duplicate effect must show up as a second row, not a conflict."""
    db.execute(LEDGER_DDL)


def ledger_rows(db: Any, run_id: str | None = None) -> list[tuple[str, str, str, int]]:
    """``(run_id, node, tag, pid)`` of every ledger row (of one run), in insert order."""
    if run_id is None:
        rows = db.execute("SELECT run_id::text, node, tag, pid FROM ledger ORDER BY id")
    else:
        rows = db.execute(
            "SELECT run_id::text, node, tag, pid FROM ledger WHERE run_id = %s ORDER BY id",
            (run_id,),
        )
    return [tuple(r) for r in rows.fetchall()]


class WorkerProcess:
    """A real ``cyclone-flow worker`` process on the test's schema."""

    def __init__(
        self,
        database_url: str,
        schema: str,
        log_path: Path,
        *,
        workers: int = 1,
        lease_ttl: str = "1s",
        allow: Sequence[str] = ("cyclone_test_handlers",),
        env: dict[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        args = [
            str(CLI),
            "worker",
            "--workers",
            str(workers),
            "--lease-ttl",
            lease_ttl,
            "--import-path",
            str(HANDLERS_PATH),
            "--database-url",
            database_url,
            "--schema",
            schema,
        ]
        for module in allow:
            args += ["--allow-module", module]
        args += list(extra_args)
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("CYCLONE_")}
        full_env.update(env or {})
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            args, cwd=REPO, env=full_env, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the process and reap it."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.wait()

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM (graceful shutdown) and reap; SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.wait()

    def wait(self) -> int:
        code = self.proc.wait()
        if not self._log.closed:
            self._log.close()
        return code

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


class ModuleWorkerProcess(WorkerProcess):
    """A worker process running ``python -m MODULE`` (e.g. one that builds its own
    ``Client`` with hooks, which ``cyclone-flow worker`` cannot take), with the test
    handlers importable and ``env`` added to a clean environment."""

    def __init__(self, module: str, log_path: Path, env: dict[str, str] | None = None) -> None:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("CYCLONE_")}
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HANDLERS_PATH), os.environ.get("PYTHONPATH", "")) if p
        )
        full_env.update(env or {})
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module],
            cwd=REPO,
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.pid = self.proc.pid

"""A SIGTERM while another session locks the steps table: the shutdown keeps its
--shutdown-timeout. The worker's release of its leases must not wait for the lock with no
bound before the handlers are told (a running handler would never be told, and the
process would exit only when the lock went away): the handlers are told at the shutdown
timeout whatever the database does, every statement of the shutdown is bounded, the process
exits soon after, and the steps it could not release are left to their lease (the
recovery sweep of another worker reclaims them, as after a crash)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from helpers.flows import step_flow
from helpers.procs import WorkerProcess, wait_until

from cyclone_flow import Client

SHUTDOWN_TIMEOUT_S = 3.0


def _step(db: psycopg.Connection[Any]) -> tuple[Any, ...] | None:
    return db.execute("SELECT state, lease_owner, attempt, reclaims FROM cyclone_steps").fetchone()


def test_sigterm_while_the_steps_table_is_locked_tells_the_handler_and_exits(
    make_client: Callable[..., Client],
    db: psycopg.Connection[Any],
    database_url: str,
    schema: str,
    tmp_path: Path,
) -> None:
    submitter = make_client()
    marker, told = tmp_path / "ran", tmp_path / "told"
    flow = step_flow("cyclone_test_handlers.ops:cooperative_once", name="locked_shutdown")
    submitter.submit(flow, {"marker": str(marker), "told": str(told), "max_wait": 600})
    worker = WorkerProcess(
        database_url,
        schema,
        tmp_path / "worker.log",
        lease_ttl="6s",
        extra_args=[
            "--shutdown-timeout",
            f"{SHUTDOWN_TIMEOUT_S:g}s",
            "--poll-interval",
            "20ms,200ms",
        ],
    )
    try:
        wait_until(marker.exists, timeout=30, what="the handler to start")
        with psycopg.connect(database_url) as locker:  # its transaction holds the lock
            locker.execute(f'LOCK TABLE "{schema}".cyclone_steps IN EXCLUSIVE MODE')
            worker.proc.send_signal(signal.SIGTERM)
            signalled, signalled_at = time.monotonic(), time.time()
            wait_until(lambda: "shutting down" in worker.log(), timeout=10, what="the SIGTERM")
            code = worker.proc.wait(timeout=SHUTDOWN_TIMEOUT_S + 10)
            took = time.monotonic() - signalled
            assert told.exists(), worker.log()  # the handler saw ctx.cancelled()
            # told by the shutdown timeout plus the write bound (2 s) and the group commit's
            # 1 s, not when the lock goes away
            told_after = told.stat().st_mtime - signalled_at
            assert told_after < SHUTDOWN_TIMEOUT_S + 4, (told_after, worker.log())
            assert code == 0, worker.log()
            assert took < SHUTDOWN_TIMEOUT_S + 10, (took, worker.log())
            # not released (the lock): left to its lease, as after a crash
            row = _step(db)
            assert row is not None and row[0] == "running", (row, worker.log())
        assert "Traceback" not in worker.log()
    finally:
        worker.kill()
    # the lock is gone: another worker's sweep reclaims the step after its lease and runs it
    second = make_client(lease_ttl=6.0, sweep_interval=0.2, poll_interval=(0.02, 0.2))
    second.start()
    wait_until(
        lambda: (_step(db) or ("",))[0] == "completed",
        timeout=30,
        what="another worker to complete the step",
    )
    row = _step(db)
    assert row is not None and row[2:] == (1, 1), row  # one reclaim, as a crash costs

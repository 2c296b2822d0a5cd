"""A shutdown that begins while a claim is in flight: the worker must not exit 0
without running or releasing the steps it had just claimed (they would stay ``running``
under the exited worker's lease until it lapsed and a sweep reclaimed them). The
shutdown cancels the claim in flight, and whatever a claim
still returns after the shutdown began is released at once, before the process exits:
nothing is left ``running`` and the steps are claimable again. Both the ordinary claim
(blocked by a table lock) and the limited claim (blocked by its advisory lock)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.flows import step_flow
from helpers.procs import WorkerProcess, wait_until

from cyclone_flow import Client
from cyclone_flow.engine import claim as claim_module

OPS = "cyclone_test_handlers.ops"
LIMITED_CLAIM_LOCK = 1130066762  # step_begin_limited_claim: (this, hashtext('"schema"'))
RUNS = 3


def _flow(limited: bool) -> Any:
    keys: dict[str, object] = {"concurrency": "{limit: 5}"} if limited else {}
    return step_flow(f"{OPS}:short_sleep", name="claim_in_flight", **keys)


def _steps(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT state, lease_owner, attempt, reclaims FROM cyclone_steps ORDER BY id"
    ).fetchall()


def _claim_waits(db: psycopg.Connection[Any], schema: str, limited: bool) -> bool:
    """Whether a backend other than the test's waits on a lock in the claim statement."""
    pattern = "%pg_advisory_xact_lock%" if limited else "%claimable%"
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
        " AND wait_event_type IN ('Lock', 'advisory') AND query LIKE %s AND query LIKE %s",
        (pattern, f"%{schema}%"),
    ).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("limited", [False, True], ids=["ordinary", "limited"])
def test_sigterm_while_the_claim_waits_for_a_lock_leaves_no_step_running(
    make_client: Callable[..., Client],
    db: psycopg.Connection[Any],
    database_url: str,
    schema: str,
    tmp_path: Path,
    limited: bool,
) -> None:
    submitter = make_client()
    marker = str(tmp_path / "ran")
    for _ in range(RUNS):
        submitter.submit(_flow(limited), {"marker": marker, "seconds": 0})
    worker: WorkerProcess | None = None
    with psycopg.connect(database_url) as locker:  # its transaction holds the lock
        if limited:
            locker.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                (LIMITED_CLAIM_LOCK, f'"{schema}"'),
            )
        else:
            locker.execute(f'LOCK TABLE "{schema}".cyclone_steps IN EXCLUSIVE MODE')
        try:
            worker = WorkerProcess(
                database_url,
                schema,
                tmp_path / "worker.log",
                workers=RUNS,
                lease_ttl="60s",  # nothing lapses during the test
                extra_args=["--shutdown-timeout", "1s", "--poll-interval", "20ms,200ms"],
            )
            wait_until(
                lambda: _claim_waits(db, schema, limited),
                timeout=30,
                what="the worker's claim to wait for the lock",
            )
            worker.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: "shutting down" in worker.log(), timeout=10, what="the SIGTERM")
            locker.commit()  # a claim still waiting goes on now and takes the steps
            assert worker.proc.wait(timeout=30) == 0, worker.log()
        finally:
            if worker is not None:
                worker.kill()
    rows = _steps(db)
    assert rows == [("available", None, 1, 0)] * RUNS, worker.log() if worker else ""
    assert "Traceback" not in (worker.log() if worker else "")
    # claimable again at once (the lease is 60 s): another worker runs them
    second = WorkerProcess(
        database_url,
        schema,
        tmp_path / "second.log",
        lease_ttl="60s",
        extra_args=["--poll-interval", "20ms,200ms"],
    )
    try:
        wait_until(
            lambda: [r[0] for r in _steps(db)] == ["completed"] * RUNS,
            timeout=30,
            what="another worker to run the steps",
        )
    finally:
        assert second.terminate(timeout=30) == 0, second.log()


@pytest.mark.parametrize("limited", [False, True], ids=["ordinary", "limited"])
def test_steps_a_claim_returns_after_the_shutdown_began_are_released(
    make_client: Callable[..., Client],
    db: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    limited: bool,
) -> None:
    """The claim statement committed, and the shutdown begins before the claim loop has
    the rows (too late to cancel it): the claim loop releases them itself."""
    client = make_client(workers=RUNS, lease_ttl=60.0, sweep_interval=60.0)
    name = "claim_limited" if limited else "claim"
    real = getattr(claim_module, name)
    returned = threading.Event()

    def claim_then_wait_for_the_shutdown(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        if got.steps if limited else got:
            returned.set()
            worker = client.runtime
            assert worker is not None
            wait_until(worker._stop.is_set, timeout=10, what="the shutdown to begin")
        return got

    monkeypatch.setattr(claim_module, name, claim_then_wait_for_the_shutdown)
    marker = str(tmp_path / "ran")
    for _ in range(RUNS):
        client.submit(_flow(limited), {"marker": marker, "seconds": 0})
    client.start()
    assert returned.wait(10), "the worker claimed nothing"
    assert [r[0] for r in _steps(db)] == ["running"] * RUNS
    client.shutdown(timeout=1.0)
    assert _steps(db) == [("available", None, 1, 0)] * RUNS
    assert not (tmp_path / "ran").exists()  # released, not run

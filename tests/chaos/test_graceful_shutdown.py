"""Graceful shutdown of real ``cyclone-flow worker`` processes (Client Options: Graceful
Shutdown; Engine Design: Leases and Heartbeats): on SIGTERM/SIGINT a worker stops
claiming, lets running handlers finish within --shutdown-timeout, then tells the rest to
stop and releases their leases, so another worker claims them at once instead of after
the lease TTL; it exits 0."""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.flows import step_flow
from helpers.procs import WorkerProcess, wait_until
from helpers.rows import step_row

from cyclone_flow import Client

OPS = "cyclone_test_handlers.ops"
TTL_S = 60.0  # long, so a claim long before it can only come from a released lease


def _owned_by(worker: WorkerProcess) -> Callable[[dict[str, Any]], bool]:
    return lambda row: row["state"] == "running" and f"/{worker.pid}/" in (row["lease_owner"] or "")


def test_sigterm_mid_handler_releases_the_step_to_another_worker_at_once(
    make_client: Callable[..., Client],
    db: Any,
    database_url: str,
    schema: str,
    tmp_path: Path,
) -> None:
    submitter = make_client()
    marker = tmp_path / "entered"
    first = WorkerProcess(
        database_url,
        schema,
        tmp_path / "first.log",
        lease_ttl="60s",
        extra_args=["--shutdown-timeout", "1s"],
    )
    second: WorkerProcess | None = None
    try:
        run_id = submitter.submit(
            step_flow(f"{OPS}:cooperative_once", name="graceful"), {"marker": str(marker)}
        )
        held = wait_until(
            lambda: marker.exists() and _owned_by(first)(row := step_row(db, run_id)) and row,
            timeout=30,
            what="the first worker to run the handler",
        )
        assert (held["lease_expiry"] - held["db_now"]).total_seconds() > TTL_S - 10
        second = WorkerProcess(database_url, schema, tmp_path / "second.log", lease_ttl="60s")
        wait_until(lambda: "started" in second.log(), timeout=30, what="the second worker")
        sigterm_at = db.execute("SELECT now()").fetchone()[0]

        assert first.terminate(timeout=30) == 0, first.log()

        row = wait_until(
            lambda: (r := step_row(db, run_id))["state"] == "completed" and r,
            timeout=30,
            what="the second worker to finish the released step",
        )
        assert f"/{second.pid}/" in row["lease_owner"]
        assert row["output"] == {"pid": second.pid, "cancelled": False}
        waited = (row["started_at"] - sigterm_at).total_seconds()
        print(f"released step claimed by another worker {waited:.2f}s after SIGTERM")
        assert 0 < waited < 15, f"claimed {waited:.1f}s after SIGTERM; the TTL is {TTL_S}s"
        # released, not reclaimed: no reclaim counted, no attempt charged
        assert (row["reclaims"], row["attempt"], row["lease_generation"]) == (0, 1, 2)
        assert submitter.get_run(run_id).state == "completed"
    finally:
        first.kill()
        if second is not None:
            second.kill()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_handler_that_ends_within_the_grace_period_completes_and_nothing_new_is_claimed(
    make_client: Callable[..., Client],
    db: Any,
    database_url: str,
    schema: str,
    tmp_path: Path,
    signum: signal.Signals,
) -> None:
    submitter = make_client()
    marker = tmp_path / "running"
    worker = WorkerProcess(
        database_url,
        schema,
        tmp_path / "worker.log",
        lease_ttl="60s",
        extra_args=["--shutdown-timeout", "30s"],
    )
    try:
        running = submitter.submit(
            step_flow(f"{OPS}:short_sleep", name="graceful"), {"marker": str(marker), "seconds": 2}
        )
        waiting = submitter.submit(
            step_flow(f"{OPS}:short_sleep", name="graceful"), {"marker": str(marker), "seconds": 0}
        )
        wait_until(
            lambda: marker.exists() and _owned_by(worker)(step_row(db, running)),
            timeout=30,
            what="the worker to run the first handler",
        )
        worker.proc.send_signal(signum)
        assert worker.proc.wait(timeout=40) == 0, worker.log()
        worker.wait()

        row = step_row(db, running)
        assert (row["state"], row["attempt"], row["lease_generation"]) == ("completed", 1, 1)
        assert row["output"] == {"pid": worker.pid}
        other = step_row(db, waiting, "s")
        assert (other["state"], other["lease_generation"]) == ("available", 0), (
            "a stopping worker must not claim new work"
        )
    finally:
        worker.kill()


def _started_python_code(pid: int) -> bool:
    """Whether process ``pid`` got past the interpreter's own start-up: it catches
    SIGTERM (``SigCgt`` in /proc: the entry point's handler) or has psycopg loaded (the
    package's imports are under way)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1))) or "psycopg" in maps


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_worker_starts_is_a_graceful_stop(
    database_url: str, schema: str, tmp_path: Path, signum: signal.Signals
) -> None:
    """From the first instant the worker's own code runs (the console script's entry
    point, before the package's imports, the pool and the schema check) a stop signal is
    the graceful stop: exit 0 (not 143), no traceback, even for a SIGTERM in the first
    half second. The interpreter's own start-up (``site``) comes first: the signal is
    sent ``delay`` seconds after the spawn, or as soon as the process runs Python code of
    its own when the interpreter takes longer to start (a loaded machine)."""
    for i, delay in enumerate((0.1, 0.1, 0.3, 0.6)):
        spawned = time.monotonic()
        worker = WorkerProcess(database_url, schema, tmp_path / f"worker{i}.log")
        try:
            wait_until(
                functools.partial(_started_python_code, worker.pid), 10, 0.002, "the entry point"
            )
            time.sleep(max(0.0, delay - (time.monotonic() - spawned)))
            worker.proc.send_signal(signum)
            sent = time.monotonic() - spawned
            code = worker.proc.wait(timeout=30)
            log = worker.log()
            assert code == 0, f"{signum.name} {sent:.2f}s after the spawn: exit {code}\n{log}"
            assert "Traceback" not in log, log
        finally:
            worker.kill()


@pytest.mark.parametrize(
    ("handler", "line"),
    [
        ("ops:cooperative_once", "stale completion not written"),
        ("failures:raise_when_cancelled", "stale failure ignored"),
    ],
    ids=["returns", "raises"],
)
def test_a_step_released_at_shutdown_logs_its_stale_result_once(
    make_client: Callable[..., Client],
    db: Any,
    database_url: str,
    schema: str,
    tmp_path: Path,
    handler: str,
    line: str,
) -> None:
    """The handler of a step whose lease the shutdown released ends after the release;
    its result is stale, and the worker says so in one line (no second "stale failure
    ignored" from the timeout check of a step with a timeout)."""
    submitter = make_client()
    worker = WorkerProcess(
        database_url,
        schema,
        tmp_path / "worker.log",
        lease_ttl="60s",
        extra_args=["--shutdown-timeout", "100ms"],
    )
    try:
        run_id = submitter.submit(
            step_flow(f"cyclone_test_handlers.{handler}", name="stale", timeout="60s"),
            {"marker": str(tmp_path / "entered")},
        )
        wait_until(
            lambda: _owned_by(worker)(step_row(db, run_id)),
            timeout=30,
            what="the worker to run the handler",
        )
        assert worker.terminate(timeout=30) == 0, worker.log()
    finally:
        worker.kill()
    log = worker.log()
    stale = [entry for entry in log.splitlines() if "stale" in entry]
    assert len(stale) == 1 and line in stale[0], log
    row = step_row(db, run_id)  # released, nothing of the late result written
    assert (row["state"], row["attempt"], row["errors"]) == ("available", 1, []), row

"""Handlers of the queue-feature tests (queues, delays, jobs, unique runs, sequences,
schedules, transactional enqueue). Coordination with in-process tests goes through the
event registry of :mod:`cyclone_test_handlers.engine`, keyed by a test-chosen ``key``."""

from __future__ import annotations

import threading
import time
from typing import Any

from cyclone_test_handlers.engine import event


def noop(ctx: Any, input: Any) -> Any:
    """Return the input."""
    return input


def sleep(ctx: Any, input: Any) -> Any:
    """Sleep ``input["sleep"]`` seconds (default 0.05), return the run id."""
    time.sleep(float((input or {}).get("sleep", 0.05)))
    return {"run": ctx.run_id}


def block(ctx: Any, input: Any) -> Any:
    """Wait (up to 20 s) until the test sets the event ``(input["key"], "go")``."""
    if not event(input["key"], "go").wait(20):
        raise RuntimeError("never released")
    return {"run": ctx.run_id}


_gauge_lock = threading.Lock()
_running: dict[tuple[str, str], int] = {}
PEAKS: dict[tuple[str, str], int] = {}
"""Most handlers of ``block_counted`` seen running at once, per ``(key, queue)``."""


def block_counted(ctx: Any, input: Any) -> Any:
    """``block``, counting how many of its handlers run at once per ``(key, queue)`` in
    :data:`PEAKS` (handler concurrency, which a worker's per-queue count bounds)."""
    gauge = (input["key"], input["queue"])
    with _gauge_lock:
        _running[gauge] = _running.get(gauge, 0) + 1
        PEAKS[gauge] = max(PEAKS.get(gauge, 0), _running[gauge])
    try:
        time.sleep(0.002)  # overlap with the handlers started right after this one
        return block(ctx, input)
    finally:
        with _gauge_lock:
            _running[gauge] -= 1


def fail_until_ok(ctx: Any, input: Any) -> Any:
    """Fail until the test sets the event ``(input["key"], "ok")``."""
    if not event(input["key"], "ok").is_set():
        raise RuntimeError("not yet")
    return {"run": ctx.run_id}


def enqueue_job(ctx: Any, input: Any) -> Any:
    """Enqueue a ``noop`` job in the completion transaction, then fail when asked."""
    job = ctx.enqueue_completion(
        "cyclone_test_handlers.queueing:noop", {"from": ctx.run_id}, queue=input.get("queue")
    )
    if input.get("fail"):
        raise RuntimeError("failing after enqueue_completion")
    return {"job": job}


def submit_flow(ctx: Any, input: Any) -> Any:
    """Submit the flow file ``input["flow"]`` in the completion transaction."""
    run = ctx.submit_completion(input["flow"], {"name": f"run {ctx.run_id[:8]}"})
    if input.get("fail"):
        raise RuntimeError("failing after submit_completion")
    return {"child": run}

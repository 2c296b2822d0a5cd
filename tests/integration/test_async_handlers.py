"""``async def`` handlers: their coroutine runs on the worker's event loop
thread while the claiming worker thread waits (the step keeps its slot); the output is
stored as for a ``def`` handler, ``ctx.completion_tx()`` works from the coroutine with the
same exactly-once rule, a timeout cancels the task and fails the attempt with kind
``timeout``, and the coroutine's prints and records land in the step's logs. On the old
code every one of these steps failed at once with ``import_error``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

from cyclone_test_handlers import engine
from helpers.flows import step_flow
from helpers.procs import wait_until
from helpers.rows import create_ledger, ledger_rows, step_row

from cyclone_flow import Client

ASYNC = "cyclone_test_handlers.asyncio_handlers"


def test_an_async_handler_runs_on_the_loop_thread_and_returns_its_output(
    make_client: Callable[..., Client],
) -> None:
    client = make_client(workers=2)
    client.start()
    runs = [client.submit(step_flow(f"{ASYNC}:double", name="a"), {"n": n}) for n in range(5)]
    for n, run_id in enumerate(runs):
        status = client.wait(run_id, timeout=20)
        assert status.state == "completed", client.list_steps(run_id)
        assert status.output == {"s": {"doubled": 2 * n, "thread": "cyclone-asyncio"}}
    assert client.runtime is not None and client.runtime.executor.event_loop.running
    # what the coroutine printed and logged is in its own step's logs (not another's)
    wait_until(lambda: client.list_step_logs(runs[3]), what="the step's log lines")
    lines = [(x.stream, x.level, x.message) for x in client.list_step_logs(runs[3])]
    assert lines == [
        ("stdout", None, "async print 3"),
        ("log", "INFO", "cyclone_flow.step: async ctx.log 3"),
        ("log", "WARNING", "cyclone_test_handlers.asyncio_handlers: async logging 3"),
    ]
    client.shutdown()
    assert not client.runtime or not client.runtime.executor.event_loop.running


def test_writes_through_completion_tx_commit_with_the_step(
    make_client: Callable[..., Client], db: Any, schema: str
) -> None:
    create_ledger(db)
    client = make_client(workers=1)
    client.start()
    run_id = client.submit(step_flow(f"{ASYNC}:write", name="w"), {"schema": schema})
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", client.list_steps(run_id)
    assert status.output == {"s": {"wrote": 2}}
    pid = os.getpid()
    assert ledger_rows(db, run_id) == [(run_id, "s", "first", pid), (run_id, "s", "second", pid)]


def test_a_raising_async_handler_rolls_its_writes_back(
    make_client: Callable[..., Client], db: Any, schema: str
) -> None:
    create_ledger(db)
    client = make_client(workers=1)
    client.start()
    run_id = client.submit(step_flow(f"{ASYNC}:write", name="w"), {"schema": schema, "raise": True})
    assert client.wait(run_id, timeout=20).state == "failed"
    assert ledger_rows(db, run_id) == []
    row = step_row(db, run_id)
    assert (row["state"], row["error_kind"], row["attempt"]) == ("discarded", "handler_error", 1)
    assert row["error"] == "ValueError: async after business write"
    assert "in write" in row["errors"][0]["traceback"]  # the coroutine's own frame


def test_a_timeout_cancels_the_coroutine_and_fails_the_attempt_with_kind_timeout(
    make_client: Callable[..., Client], db: Any, schema: str
) -> None:
    """The task is cancelled at the timeout (its ``except CancelledError`` runs), its
    ledger row rolls back, its own worker records attempt 1 as ``timeout`` (no sweep:
    sweep_interval is an hour) and attempt 2 completes."""
    create_ledger(db)
    key = uuid.uuid4().hex
    client = make_client(workers=1, lease_ttl=30.0, sweep_interval=3600)
    client.start()
    flow = step_flow(
        f"{ASYNC}:hang",
        name="t",
        timeout="1s",
        retry="{max_attempts: 2, backoff: {initial: 0s}}",
    )
    run_id = client.submit(flow, {"schema": schema, "key": key})
    assert engine.event(key, "entered").wait(20), "the coroutine never started"
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", client.list_steps(run_id)
    assert status.output == {"s": {"attempt": 2}}
    assert engine.event(key, "cancelled").is_set()
    assert engine.observed(key) == [{"cancelled": True, "saw_ctx_cancelled": True}]
    row = step_row(db, run_id)
    (error,) = row["errors"]
    assert (error["attempt"], error["error_kind"]) == (1, "timeout")
    assert error["error"] == "step timed out (started_at + timeout passed)"
    assert ledger_rows(db, run_id) == [(run_id, "s", "attempt2", os.getpid())]


def test_shutdown_cancels_a_running_coroutine_and_releases_its_lease(
    make_client: Callable[..., Client], db: Any, schema: str
) -> None:
    create_ledger(db)
    key = uuid.uuid4().hex
    client = make_client(workers=1, lease_ttl=30.0)
    client.start()
    run_id = client.submit(step_flow(f"{ASYNC}:hang", name="t"), {"schema": schema, "key": key})
    assert engine.event(key, "entered").wait(20)
    client.shutdown(timeout=0.1)
    assert engine.event(key, "cancelled").wait(10)
    row = step_row(db, run_id)
    assert (row["state"], row["lease_owner"], row["attempt"]) == ("available", None, 1)
    assert ledger_rows(db, run_id) == []


def test_exceptions_of_async_handlers_fail_the_attempt_and_the_loop_keeps_serving(
    make_client: Callable[..., Client],
) -> None:
    client = make_client(workers=1)
    client.start()
    for call, error in (
        ("crash", "RuntimeError: async boom"),
        ("system_exit", "SystemExit: 3"),
    ):
        run_id = client.submit(step_flow(f"{ASYNC}:{call}", name="x"))
        assert client.wait(run_id, timeout=20).state == "failed"
        (step,) = client.list_steps(run_id)
        assert (step.error_kind, step.error) == ("handler_error", error)
    run_id = client.submit(step_flow(f"{ASYNC}:double", name="a"), {"n": 1})
    assert client.wait(run_id, timeout=20).state == "completed"

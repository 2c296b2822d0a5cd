"""The failure rules (docs/failures.md) that other test files do not pin
down: a durable timeout
(the heartbeat stops renewing, the handler is told, a late completion is ignored even
before the sweep, the attempt fails with kind timeout and is retried), the reclaim limit
with real worker processes that a handler kills on every call, and the containment of
``cancel_branch`` (Engine Design: Leases and Heartbeats, Failure Propagation; Client
Options: WithMaxReclaims)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cyclone_test_handlers import engine
from helpers.engine import claim, heartbeat
from helpers.procs import WorkerProcess, wait_until
from helpers.rows import create_ledger, ledger_rows, step_row

from cyclone_flow import (
    Client,
    ConfigError,
    PayloadLimits,
    PayloadTooLargeError,
    StepEvent,
    StepTimeoutError,
)
from cyclone_flow.flowfile import load_flow_text

TIMEOUT_FLOW = """
name: timeouts
nodes:
  s:
    call: cyclone_test_handlers.engine:until_cancelled
    timeout: 1s
    retry: {max_attempts: 2, backoff: {initial: 0}}
"""


def test_timeout_tells_the_handler_and_its_worker_fails_the_attempt_at_once(
    make_client: Callable[..., Client], db: Any, schema: str
) -> None:
    """At started_at + timeout the handler is told; it returns at once, but its completion
    (and ledger row) is late and rolls back, and its own worker records the attempt as
    failed with kind timeout without waiting for the sweep; attempt 2 completes."""
    create_ledger(db)
    key = uuid.uuid4().hex
    events: list[StepEvent] = []
    errors: list[BaseException] = []
    client = make_client(
        workers=1,
        lease_ttl=30.0,  # neither the heartbeat (every 10 s) nor a sweep tells it
        sweep_interval=3600,
        on_step_event=events.append,
        error_handler=lambda _event, error: errors.append(error),
    )
    client.start()
    run_id = client.submit(load_flow_text(TIMEOUT_FLOW), {"schema": schema, "key": key})
    status = client.wait(run_id, timeout=8)
    assert status.state == "completed", client.list_steps(run_id)
    assert status.output == {"s": {"call": 2, "cancelled": False}}
    assert engine.observed(key) == [
        {"call": 1, "cancelled": True},
        {"call": 2, "cancelled": False},
    ]
    row = step_row(db, run_id)
    assert (row["attempt"], row["reclaims"], row["lease_generation"]) == (2, 0, 2)
    (error,) = row["errors"]
    assert (error["attempt"], error["error_kind"]) == (1, "timeout")
    assert ledger_rows(db, run_id) == [(run_id, "s", "call2", os.getpid())]
    assert [type(e) for e in errors] == [StepTimeoutError]
    wait_until(lambda: any(e.kind == "completed" for e in events), what="completed event")
    timeouts = [e for e in events if e.kind == "retry_scheduled"]
    assert [(e.node, e.error_kind) for e in timeouts] == [("s", "timeout")]


def test_a_handler_raising_after_its_timeout_fails_with_kind_timeout(
    make_client: Callable[..., Client],
) -> None:
    client = make_client(workers=1, lease_ttl=30.0, sweep_interval=3600)
    client.start()
    flow = load_flow_text(
        "name: t\nnodes:\n  s:\n    call: cyclone_test_handlers.failures:raise_when_cancelled\n"
        "    timeout: 1s\n"
    )
    run_id = client.submit(flow, None)
    assert client.wait(run_id, timeout=8).state == "failed"
    (step,) = client.list_steps(run_id)
    assert (step.state, step.error_kind, step.attempt) == ("discarded", "timeout", 1)
    assert [e["error_kind"] for e in step.errors] == ["timeout"]  # not its handler_error


def test_heartbeat_stops_renewing_a_lease_past_its_timeout(
    make_client: Callable[..., Client], db: Any
) -> None:
    """The guard that makes the timeout durable: past started_at + timeout the heartbeat
    renews nothing, so the handler is told even where no local timer runs."""
    client = make_client()
    run_id = client.submit(
        load_flow_text("name: t\nnodes:\n  s: {call: 'x.y:z', timeout: 1s}\n"), None
    )
    (step,) = claim(client, "hb", 30.0, ["default"], 1)
    lease = (step.id, step.lease_generation)
    assert heartbeat(client, "hb", 30.0, [lease]) == {lease}  # before the deadline
    before = step_row(db, run_id)

    def past_deadline() -> bool:
        row = step_row(db, run_id)
        return bool(row["started_at"] + row["timeout"] <= row["db_now"])

    wait_until(past_deadline, timeout=5, what="started_at + timeout to pass")
    assert heartbeat(client, "hb", 30.0, [lease]) == set()
    after = step_row(db, run_id)
    assert (after["state"], after["lease_expiry"]) == ("running", before["lease_expiry"])


@pytest.mark.chaos
def test_reclaim_limit_stops_a_handler_that_kills_its_worker_every_time(
    make_client: Callable[..., Client], database_url: str, schema: str, tmp_path: Path
) -> None:
    """Real ``cyclone-flow worker --max-reclaims 2`` processes, each SIGKILLed by the
    handler: the step runs 3 times (the first claim and 2 reclaims), then the next expiry
    discards it with reclaim_limit, no attempt charged although 3 were allowed."""
    calls = tmp_path / "calls"
    flow = load_flow_text(
        "name: dies\nnodes:\n  d:\n    call: cyclone_test_handlers.failures:die\n"
        "    retry: {max_attempts: 3}\n"
    )
    client = make_client()
    run_id = client.submit(flow, {"log": str(calls)})
    spawned: list[WorkerProcess] = []

    def spawn() -> WorkerProcess:
        proc = WorkerProcess(
            database_url,
            schema,
            tmp_path / f"worker-{len(spawned)}.log",
            lease_ttl="1s",
            extra_args=["--max-reclaims", "2"],
        )
        spawned.append(proc)
        return proc

    worker = spawn()
    deadline = time.monotonic() + 60
    try:
        while not client.get_run(run_id).state.terminal:
            assert time.monotonic() < deadline, "the run never ended"
            if not worker.alive():
                worker.wait()
                worker = spawn()  # the replacement's sweep reclaims or discards the step
            time.sleep(0.05)
    finally:
        for proc in spawned:
            proc.terminate()
    (step,) = client.list_steps(run_id)
    assert (step.state, step.error_kind, step.attempt, step.reclaims) == (
        "discarded",
        "reclaim_limit",
        1,
        2,
    ), step
    assert [e["error_kind"] for e in step.errors] == ["reclaim_limit"]
    assert [line.split()[0] for line in calls.read_text().splitlines()] == ["1", "1", "1"]
    assert client.get_run(run_id).state == "failed"
    logs = "".join(p.log() for p in spawned)
    assert "lease expired after 2 reclaims" in logs, logs


def test_negative_max_reclaims_is_rejected_at_construction(database_url: str) -> None:
    with pytest.raises(ConfigError, match="max_reclaims must be an integer >= 0"):
        Client(database_url, max_reclaims=-1)


CONTAINED = """
name: contained
nodes:
  a: {call: "cyclone_test_handlers.basic:boom"}
  b: {call: "cyclone_test_handlers.basic:echo", needs: [a], on_dep_failure: cancel_branch}
  c: {call: "cyclone_test_handlers.basic:echo", needs: [b], on_dep_failure: cancel_branch}
  e: {call: "cyclone_test_handlers.basic:echo"}
  join: {call: "cyclone_test_handlers.basic:echo", needs: [c, e], on_dep_failure: cancel_branch}
  f: {call: "cyclone_test_handlers.basic:echo", needs: [e]}
"""

# b contains the failure for itself, but c (downstream of a through b) says fail_run
NOT_CONTAINED_DEEP = """
name: deep
nodes:
  a: {call: "cyclone_test_handlers.basic:boom"}
  b: {call: "cyclone_test_handlers.basic:echo", needs: [a], on_dep_failure: cancel_branch}
  c: {call: "cyclone_test_handlers.basic:echo", needs: [b]}
  e: {call: "cyclone_test_handlers.basic:echo"}
"""

NOT_CONTAINED_SIBLING = """
name: sibling
nodes:
  a: {call: "cyclone_test_handlers.basic:boom"}
  b: {call: "cyclone_test_handlers.basic:echo", needs: [a], on_dep_failure: cancel_branch}
  c: {call: "cyclone_test_handlers.basic:echo", needs: [a], on_dep_failure: fail_run}
"""


def test_cancel_branch_on_every_downstream_node_contains_a_deep_branch(
    make_client: Callable[..., Client],
) -> None:
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(load_flow_text(CONTAINED), {"v": 1})
    status = client.wait(run_id, timeout=15)
    assert (status.state, status.error) == ("completed", None)
    assert status.output == {"f": {"v": 1}}
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert {n: s.state for n, s in steps.items()} == {
        "a": "discarded",
        "b": "cancelled",
        "c": "cancelled",
        "e": "completed",
        "join": "cancelled",
        "f": "completed",
    }
    assert all(steps[n].started_at is None for n in ("b", "c", "join"))


@pytest.mark.parametrize("flow", [NOT_CONTAINED_DEEP, NOT_CONTAINED_SIBLING], ids=["deep", "sib"])
def test_one_fail_run_node_downstream_makes_the_discard_fatal(
    make_client: Callable[..., Client], flow: str
) -> None:
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(load_flow_text(flow), {"v": 1})
    status = client.wait(run_id, timeout=15)
    assert (status.state, status.error_kind) == ("failed", "step_discarded")
    assert "step a discarded" in (status.error or "")
    steps = {s.node: s.state for s in client.list_steps(run_id)}
    assert steps["a"] == "discarded"
    assert steps["b"] == "cancelled" and steps["c"] == "cancelled"


def test_each_attempt_keeps_its_error_and_a_trimmed_traceback(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    flow = load_flow_text(
        "name: huge\nnodes:\n  h:\n    call: cyclone_test_handlers.failures:huge_error\n"
        "    retry: {max_attempts: 2, backoff: {initial: 0}}\n"
    )
    run_id = client.submit(flow, None)
    client.start()
    assert client.wait(run_id, timeout=15).state == "failed"
    (step,) = client.list_steps(run_id)
    assert [e["attempt"] for e in step.errors] == [1, 2]
    for entry in step.errors:
        assert entry["error_kind"] == "handler_error"
        assert entry["error"].startswith("ValueError: EEEE")
        assert entry["error"].endswith("(96000 more characters cut)")
        assert len(entry["error"]) < 4_100
        tb = entry["traceback"]
        assert len(tb) == 8_000  # the end of the traceback: where it was raised
        assert 'in huge_error\n    raise ValueError("E" * 100_000) from exc' in tb
        assert "IndexError: level 60" in tb and "KeyError" not in tb  # the last links
        assert tb.splitlines()[-1] == "ValueError: " + "E" * 488 + "..."
        assert entry["at"]
    assert step.error == step.errors[-1]["error"]


def test_too_large_output_discards_at_once_with_payload_too_large(
    make_client: Callable[..., Client],
) -> None:
    errors: list[BaseException] = []
    client = make_client(
        payload_limits=PayloadLimits(output_bytes=100),
        error_handler=lambda _event, error: errors.append(error),
    )
    flow = load_flow_text(
        "name: big\nnodes:\n  b:\n    call: cyclone_test_handlers.basic:echo\n"
        "    retry: {max_attempts: 3}\n"
    )
    run_id = client.submit(flow, {"text": "x" * 200})
    client.start()
    assert client.wait(run_id, timeout=15).state == "failed"
    (step,) = client.list_steps(run_id)
    assert (step.state, step.attempt, step.error_kind) == ("discarded", 1, "payload_too_large")
    assert step.output is None
    wait_until(lambda: errors, what="the error handler call")
    (error,) = errors
    assert isinstance(error, PayloadTooLargeError)
    assert (error.kind, error.size, error.limit) == ("output", 211, 100)

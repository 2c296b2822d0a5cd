"""Operator actions and retry bookkeeping: cancel, retry, retry_all, backoff bounds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from cyclone_test_handlers import operator
from helpers.engine import claim, database, fail_step, sweep_once
from helpers.procs import wait_until

from cyclone_flow import Client, RunStateError
from cyclone_flow.flowfile import load_flow_text

FLOW = """
name: operator
nodes:
  a:
    call: cyclone_test_handlers.operator:flaky
    retry: {max_attempts: 2, backoff: {initial: 10ms, max: 20ms}}
  b:
    call: cyclone_test_handlers.basic:echo
    needs: [a]
"""


@pytest.fixture(autouse=True)
def _reset() -> None:
    operator.FAIL["on"] = True
    operator.GATE.clear()


def test_failed_run_retry_resets_attempts_and_completes(make_client: Callable[..., Client]) -> None:
    client = make_client(workers=2)
    run_id = client.submit(load_flow_text(FLOW), {"x": 1})
    client.start()
    status = client.wait(run_id, timeout=20)
    assert status.state == "failed"
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert steps["a"].state == "discarded" and steps["a"].attempt == 2
    assert [e["attempt"] for e in steps["a"].errors] == [1, 2]
    assert "RuntimeError: flaky is failing" in steps["a"].errors[0]["traceback"]
    assert steps["b"].state == "cancelled"

    operator.FAIL["on"] = False
    assert client.retry(run_id) == ["a", "b"]
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", status
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert steps["a"].attempt == 1 and steps["a"].reclaims == 0
    assert steps["a"].output == {"attempt": 1}
    assert len(steps["a"].errors) == 2  # history kept across the operator retry


def test_retry_refuses_running_and_unknown_node(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run_id = client.submit(load_flow_text(FLOW), {})
    with pytest.raises(RunStateError, match="only failed or cancelled"):
        client.retry(run_id)
    client.cancel(run_id)
    with pytest.raises(RunStateError, match="no node 'zzz'"):
        client.retry(run_id, node="zzz")


def test_retry_all_failed_by_flow(make_client: Callable[..., Client]) -> None:
    client = make_client(workers=4)
    flow = load_flow_text(FLOW)
    runs = [client.submit(flow, {"i": i}) for i in range(3)]
    client.start()
    for run_id in runs:
        assert client.wait(run_id, timeout=20).state == "failed"
    operator.FAIL["on"] = False
    assert client.retry_all(flow="other-flow") == []
    assert sorted(client.retry_all(flow="operator")) == sorted(runs)
    for run_id in runs:
        assert client.wait(run_id, timeout=20).state == "completed"


def test_cancel_stops_a_running_handler_and_ignores_its_completion(
    make_client: Callable[..., Client],
) -> None:
    events: list[Any] = []
    client = make_client(workers=2, lease_ttl=0.6, on_step_event=events.append)
    flow = load_flow_text(
        """
name: gated
nodes:
  g: {call: "cyclone_test_handlers.operator:gated"}
  after: {call: "cyclone_test_handlers.basic:echo", needs: [g]}
"""
    )
    run_id = client.submit(flow, {})
    client.start()
    wait_until(lambda: client.list_steps(run_id)[0].state == "running", 10)
    assert client.cancel(run_id) is True
    assert client.cancel(run_id) is False  # already terminal: nothing changes
    operator.GATE.set()  # the handler returns now; its completion must be stale
    wait_until(lambda: client.runtime is not None and client.in_flight() == 0, 10)
    run = client.get_run(run_id)
    assert run.state == "cancelled"
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert steps["g"].state == "cancelled" and steps["g"].output is None
    assert steps["after"].state == "cancelled"
    assert {(e.kind, e.node) for e in events} >= {("cancelled", "g"), ("cancelled", "after")}
    assert not any(e.kind == "completed" for e in events)


def test_permanent_error_discards_at_once(make_client: Callable[..., Client]) -> None:
    client = make_client()
    flow = load_flow_text(
        """
name: permanent
nodes:
  p:
    call: cyclone_test_handlers.operator:permanent
    retry: {max_attempts: 5}
"""
    )
    run_id = client.submit(flow, None)
    client.start()
    assert client.wait(run_id, timeout=20).state == "failed"
    (step,) = client.list_steps(run_id)
    assert step.state == "discarded" and step.attempt == 1
    assert step.error_kind == "handler_error" and "do not retry me" in (step.error or "")


@pytest.mark.parametrize("attempt", [1, 2, 5, 60, 10_000])
def test_backoff_is_computed_by_the_database_and_capped(
    make_client: Callable[..., Client], db: Any, attempt: int
) -> None:
    client = make_client()
    flow = load_flow_text(
        """
name: backoff
nodes:
  a:
    call: cyclone_test_handlers.operator:flaky
    retry: {max_attempts: 1000, backoff: {initial: 1s, max: 1h, multiplier: 2, jitter: 0.1}}
"""
    )
    run_id = client.submit(flow, None)
    (step,) = claim(client, client.config.client_id, 30, ["default"], 1)
    db.execute(
        "UPDATE cyclone_steps SET attempt = %s, max_attempts = %s WHERE id = %s",
        (attempt, attempt + 1, step.id),
    )
    with database(client).pool.connection() as conn, conn.transaction():
        outcome = fail_step(
            client,
            conn,
            step_id=step.id,
            run_id=run_id,
            generation=step.lease_generation,
            owner=client.config.client_id,
            error="x",
            error_kind="handler_error",  # type: ignore[arg-type]
        )
    assert outcome is not None and outcome.step_state == "available"
    row = db.execute(
        "SELECT extract(epoch FROM scheduled_at - now()), attempt FROM cyclone_steps WHERE id = %s",
        (step.id,),
    ).fetchone()
    delay, new_attempt = float(row[0]), row[1]
    assert new_attempt == attempt + 1
    expected = min(3600.0, 2.0 ** min(attempt - 1, 20))
    assert expected * 0.9 - 1 <= delay <= min(3600.0, expected * 1.1) + 1
    if attempt >= 60:
        assert 3600 * 0.9 - 1 <= delay <= 3600 + 1  # capped, never overflowing


def test_reclaim_limit_discards_without_charging_an_attempt(
    make_client: Callable[..., Client], db: Any
) -> None:
    """max_reclaims=1: the first expiry reclaims, the next discards with reclaim_limit (no
    attempt charged) and the error handler gets ReclaimLimitExceeded."""
    errors: list[tuple[Any, BaseException]] = []
    events: list[Any] = []
    client = make_client()
    flow = load_flow_text(
        "name: rl\nnodes:\n"
        "  a: {call: 'cyclone_test_handlers.basic:echo', retry: {max_attempts: 3}}\n"
    )
    run_id = client.submit(flow, None)
    sweeper = make_client(
        max_reclaims=1,
        error_handler=lambda s, e: errors.append((s, e)),
        on_step_event=events.append,
        worker_queues={"elsewhere": 1},  # claims nothing of this flow
        sweep_interval=3600,  # sweeps only when the test says so
    )
    sweeper.start()
    assert sweeper.runtime is not None

    def crash_holding_the_lease() -> None:
        assert len(claim(client, "ghost", 30, ["default"], 1)) == 1
        db.execute("UPDATE cyclone_steps SET lease_expiry = now() - interval '1s'")

    crash_holding_the_lease()
    assert sweep_once(sweeper)["rescued"] == 1
    (s,) = client.list_steps(run_id)
    assert (s.state, s.reclaims, s.attempt) == ("available", 1, 1)

    crash_holding_the_lease()
    assert sweep_once(sweeper)["reclaim_limit"] == 1
    (s,) = client.list_steps(run_id)
    assert (s.state, s.error_kind, s.attempt) == ("discarded", "reclaim_limit", 1)
    assert client.get_run(run_id).state == "failed"
    assert [type(e).__name__ for _, e in errors] == ["ReclaimLimitExceeded"]
    assert [(e.kind, e.error_kind) for e in events] == [
        ("reclaimed", None),
        ("discarded", "reclaim_limit"),
    ]

    client.retry(run_id)
    (s,) = client.list_steps(run_id)
    assert (s.state, s.reclaims, s.attempt) == ("available", 0, 1)


def test_completed_run_with_a_contained_discard_can_be_retried(
    make_client: Callable[..., Client],
) -> None:
    flow = load_flow_text(
        """
name: contained
nodes:
  a: {call: "cyclone_test_handlers.operator:flaky"}
  b: {call: "cyclone_test_handlers.basic:echo", needs: [a], on_dep_failure: cancel_branch}
  c: {call: "cyclone_test_handlers.basic:add", input: {a: 1, b: 1}}
"""
    )
    client = make_client(workers=2)
    run_id = client.submit(flow, {"x": 1})
    client.start()
    status = client.wait(run_id, timeout=20)
    assert (status.state, status.output) == ("completed", {"c": {"sum": 2}})
    operator.FAIL["on"] = False
    assert client.retry(run_id) == ["a", "b"]
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed"
    assert status.output == {"b": {"x": 1}, "c": {"sum": 2}}
    with pytest.raises(RunStateError, match="only failed or cancelled runs"):
        client.retry(run_id)  # completed, nothing discarded any more

"""Handlers that misbehave, and the engine paths that must stay correct around them:
a failed attempt instead of an endless reclaim loop, isolation of cached data, leases
that come back to the same client."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from cyclone_test_handlers import engine
from helpers.engine import sweep_once
from helpers.procs import wait_until
from helpers.rows import create_ledger, ledger_rows, step_row

from cyclone_flow import AllowList, Client, InputValidationError, RunStateError
from cyclone_flow.flowfile import load_flow_text


def _one(call: str, **node: Any) -> Any:
    extra = "".join(f"\n    {k}: {v}" for k, v in node.items())
    return load_flow_text(f"name: one\nnodes:\n  s:\n    call: {call}{extra}\n")


@pytest.mark.parametrize(
    ("call", "needle", "attempts"),
    [
        ("cyclone_test_handlers.misbehave:nul_output", "NUL character", 1),
        ("cyclone_test_handlers.misbehave:nul_error", "bad byte \\x00 here", 2),
        ("cyclone_test_handlers.misbehave:surrogate_output", "lone surrogate (U+D800)", 1),
        ("cyclone_test_handlers.misbehave:surrogate_error", "bad char \\udcff here", 2),
        ("cyclone_test_handlers.misbehave:swallow_sql_error", "completion transaction failed", 2),
        ("cyclone_test_handlers.misbehave:deep_output", "nested too deeply", 1),
    ],
)
def test_bad_results_fail_the_attempt_instead_of_looping(
    make_client: Callable[..., Client], call: str, needle: str, attempts: int
) -> None:
    client = make_client(lease_ttl=1.0)
    flow = _one(call, retry="{max_attempts: 2, backoff: {initial: 10ms}}")
    run_id = client.submit(flow, {"depth": 5000})
    client.start()
    assert client.wait(run_id, timeout=20).state == "failed"
    (step,) = client.list_steps(run_id)
    assert step.state == "discarded" and step.reclaims == 0
    assert step.attempt == attempts  # NUL and too deep outputs are permanent; others retried
    assert needle in (step.error or "")


def test_raw_commit_in_the_completion_transaction_is_a_permanent_failure(
    make_client: Callable[..., Client], db: Any, schema: str
) -> None:
    create_ledger(db)
    client = make_client()
    flow = _one("cyclone_test_handlers.misbehave:raw_commit", retry="{max_attempts: 3}")
    run_id = client.submit(flow, {"schema": schema})
    client.start()
    assert client.wait(run_id, timeout=20).state == "failed"
    (step,) = client.list_steps(run_id)
    assert step.attempt == 1 and "ended its completion transaction" in (step.error or "")
    assert len(ledger_rows(db, run_id)) == 1  # committed behind the engine: not run again


def test_handlers_cannot_change_cached_inputs_or_outputs(
    make_client: Callable[..., Client],
) -> None:
    flow = load_flow_text(
        """
name: mutation
nodes:
  a: {call: "cyclone_test_handlers.misbehave:make_list"}
  b: {call: "cyclone_test_handlers.misbehave:mutate", needs: [a]}
  c: {call: "cyclone_test_handlers.basic:echo", needs: [b]}
  d:
    call: cyclone_test_handlers.basic:echo
    needs: [b]
    input: {a: "${{ nodes.a.output }}"}
"""
    )
    client = make_client(workers=1)
    run_id = client.submit(flow, {"secret": "s"})
    client.start()
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed"
    assert status.output == {"c": {"secret": "s"}, "d": {"a": {"list": [1, 2]}}}


def test_a_lease_that_comes_back_to_the_same_client_keeps_its_heartbeat(
    make_client: Callable[..., Client], db: Any
) -> None:
    """The old handler of a reclaimed step returning late must not drop the new lease."""
    key = uuid.uuid4().hex
    client = make_client(workers=2, lease_ttl=0.9, sweep_interval=3600)
    flow = _one("cyclone_test_handlers.misbehave:twice")
    run_id = client.submit(flow, {"key": key, "second_s": 1.5})
    client.start()
    assert client.runtime is not None
    assert engine.event(key, "entered1").wait(10)
    db.execute("UPDATE cyclone_steps SET lease_expiry = now() - interval '1s'")
    assert sweep_once(client)["rescued"] == 1
    assert engine.event(key, "entered2").wait(10)  # the same client claimed it again
    engine.event(key, "release1").set()  # the first handler returns: stale
    wait_until(lambda: client.in_flight() == 1, what="the first handler to return")
    released_at = db.execute("SELECT now()").fetchone()[0]
    wait_until(
        lambda: step_row(db, run_id)["heartbeat_at"] > released_at,
        timeout=5,
        what="a heartbeat of the second lease after the first handler returned",
    )
    assert sweep_once(client)["rescued"] == 0
    assert client.wait(run_id, timeout=10).state == "completed"
    row = step_row(db, run_id)
    assert (row["lease_generation"], row["reclaims"], row["output"]["call"]) == (2, 1, 2)


def test_run_command_worker_claims_only_its_own_run(make_client: Callable[..., Client]) -> None:
    other_flow = _one("cyclone_test_handlers.basic:echo")
    mine_flow = load_flow_text(
        "name: mine\nnodes:\n  m: {call: 'cyclone_test_handlers.basic:add', input: {a: 1, b: 2}}\n"
    )
    submitter = make_client()
    other = submitter.submit(other_flow, {"x": 1})
    runner = make_client(allow_modules=AllowList(exact={"cyclone_test_handlers.basic"}))
    mine = runner.submit(mine_flow, None)
    runner.start(run_id=mine)
    assert runner.wait(mine, timeout=20).state == "completed"
    (step,) = runner.list_steps(other)
    assert step.state == "available"  # untouched


def test_retry_of_a_node_below_a_discarded_one_is_refused(
    make_client: Callable[..., Client],
) -> None:
    flow = load_flow_text(
        """
name: below
nodes:
  a: {call: "cyclone_test_handlers.basic:boom"}
  b: {call: "cyclone_test_handlers.basic:echo", needs: [a]}
"""
    )
    client = make_client()
    run_id = client.submit(flow, {})
    client.start()
    assert client.wait(run_id, timeout=20).state == "failed"
    with pytest.raises(RunStateError, match="downstream of the discarded node 'a'"):
        client.retry(run_id, node="b")
    assert client.get_run(run_id).state == "failed"  # nothing changed
    assert {s.node: s.state for s in client.list_steps(run_id)} == {
        "a": "discarded",
        "b": "cancelled",
    }


def test_nul_in_input_is_refused_before_any_write(make_client: Callable[..., Client]) -> None:
    client = make_client()
    with pytest.raises(InputValidationError, match="NUL"):
        client.submit(_one("cyclone_test_handlers.basic:echo"), {"s": "a\x00"})
    assert client.list_runs() == []

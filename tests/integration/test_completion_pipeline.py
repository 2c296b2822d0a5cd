"""The completion transaction sends its run lock, the step's compare-and-swap and the
first advance statements in one pipeline (``cyclone_flow.engine.complete.complete_step``):
a database error still surfaces as the same psycopg error with the connection usable, and
a stale completion changes nothing even when its transaction is (wrongly) committed
(Engine Design: CAS State Transitions)."""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
import pytest
from helpers.engine import claim, complete_step, complete_steps, database
from helpers.rows import step_row

from cyclone_flow.flowfile import load_flow_text

CHAIN = load_flow_text(
    """
name: chain2
nodes:
  a: {call: cyclone_test_handlers.basic:echo}
  b: {call: cyclone_test_handlers.basic:echo, needs: [a]}
"""
)

ITEMS = load_flow_text(
    """
name: items
nodes:
  each:
    type: fan_out
    over: [1, 2, 3]
    call: cyclone_test_handlers.node_types:square
"""
)


def test_an_error_in_the_pipelined_completion_raises_and_the_connection_stays_usable(
    make_client: Any, db: psycopg.Connection[Any]
) -> None:
    client = make_client(client_id="pipe")
    run_id = client.submit(CHAIN, {"v": 1})
    (step,) = claim(client, "w", 30.0, ["default"], 1)
    with database(client).pool.connection() as conn:
        with pytest.raises(psycopg.errors.InFailedSqlTransaction), conn.transaction():
            with pytest.raises(psycopg.errors.DivisionByZero):
                conn.execute("SELECT 1/0")  # a handler left its completion_tx failed
            complete_step(client, conn, step, "w", '{"x": 1}')
        # rolled back; pipeline mode left; the same connection completes the step
        assert conn.info.pipeline_status == psycopg.pq.PipelineStatus.OFF
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert step_row(db, run_id, "a")["state"] == "running"
        with conn.transaction():
            outcome = complete_step(client, conn, step, "w", '{"x": 1}')
        assert outcome is not None and outcome.wakeups.queues == {"default"}
    assert (step_row(db, run_id, "a")["state"], step_row(db, run_id, "b")["state"]) == (
        "completed",
        "available",
    )


def test_a_stale_completion_changes_nothing_even_when_committed(
    make_client: Any, db: psycopg.Connection[Any]
) -> None:
    """The release and run completion sent with a stale CAS are guarded and idempotent;
    a fan-out item's count is sent only after its CAS hit."""
    client = make_client(client_id="stale-pipe")
    chain_run = client.submit(CHAIN, {"v": 1})
    (a,) = claim(client, "w", 30.0, ["default"], 1)
    with database(client).pool.connection() as conn, conn.transaction():  # commits on exit
        assert complete_step(client, conn, a, "not-the-owner", "{}") is None
    assert [step_row(db, chain_run, n)["state"] for n in ("a", "b")] == ["running", "pending"]
    assert client.get_run(chain_run).state == "running"

    items_run = client.submit(ITEMS, {})
    claimed = claim(client, "w", 30.0, ["default"], 10)
    items = [s for s in claimed if s.run_id == items_run]
    assert len(items) == 3 and all(s.parent_node == "each" for s in items)
    with database(client).pool.connection() as conn, conn.transaction():
        assert complete_step(client, conn, items[0], "not-the-owner", "1") is None
    assert step_row(db, items_run, "each")["items_done"] == 0
    for item in items:
        with database(client).pool.connection() as conn, conn.transaction():
            assert complete_step(client, conn, item, "w", "1") is not None
    each = step_row(db, items_run, "each")
    assert (each["state"], each["items_done"], each["output"]) == ("completed", 3, [1, 1, 1])
    assert client.get_run(items_run).state == "completed"


DIAMOND = load_flow_text(
    """
name: diamond2
nodes:
  a: {call: cyclone_test_handlers.basic:echo}
  b: {call: cyclone_test_handlers.basic:echo, needs: [a]}
  c: {call: cyclone_test_handlers.basic:echo, needs: [a]}
  d: {call: cyclone_test_handlers.basic:echo, needs: [b, c]}
"""
)

ONE = load_flow_text("name: one2\nnodes:\n  only: {call: cyclone_test_handlers.basic:echo}\n")


def test_complete_steps_commits_a_batch_of_completions(
    make_client: Any, db: psycopg.Connection[Any]
) -> None:
    """A batch (as the group-commit completer sends it): the fan-in join of two steps
    completed together is released once, a one-step run completes, every item of a
    fan-out completed together completes the fan-out node and its run, and a stale row
    (a lease generation that is not the claim's) is reported stale without failing the
    others."""
    client = make_client(client_id="batch")
    diamond = client.submit(DIAMOND, {})
    (a,) = claim(client, "w", 30.0, ["default"], 1)
    with database(client).pool.connection() as conn, conn.transaction():
        assert complete_step(client, conn, a, "w", "{}") is not None
    one = client.submit(ONE, {})
    items_run = client.submit(ITEMS, {})
    claimed = claim(client, "w", 30.0, ["default"], 10)
    assert sorted(s.node for s in claimed) == ["b", "c", "each[0]", "each[1]", "each[2]", "only"]
    stale = dataclasses.replace(claimed[0], lease_generation=claimed[0].lease_generation + 7)
    batch = [(s, "1") for s in claimed] + [(stale, "2")]
    with database(client).pool.connection() as conn, conn.transaction():
        outcomes = complete_steps(client, conn, "w", batch)
    assert outcomes[-1] is None and all(o is not None for o in outcomes[:-1])
    finished = {
        s.run_id: o.run_state
        for (s, _), o in zip(batch, outcomes, strict=True)
        if o and o.run_state
    }
    assert finished == {one: "completed", items_run: "completed"}
    wakeups = set().union(*(o.wakeups.queues for o in outcomes if o))
    runs_done = set().union(*(o.wakeups.runs_done for o in outcomes if o))
    assert wakeups == {"default"} and runs_done == {one, items_run}
    assert step_row(db, diamond, "d")["state"] == "available"
    assert client.get_run(one).output == {"only": 1}
    assert client.get_run(items_run).output == {"each": [1, 1, 1]}
    assert client.get_run(diamond).state == "running"

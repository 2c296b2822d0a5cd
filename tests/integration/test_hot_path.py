"""The claim and completion hot path (benchmarks/FINDINGS.md findings 1 and 2):
the claim walks the partial claim index in order, returns the run input with the claim
when the node may need it, and a completion fills this client's output cache, so a
downstream step claimed by the same client reads nothing back."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from helpers.engine import claim, database, get_step_output_text, worker_parts

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text

ONE = """
name: one
nodes:
  only:
    call: cyclone_test_handlers.basic:echo
"""

ROOTS = """
name: roots
nodes:
  plain:
    call: cyclone_test_handlers.basic:echo
  from_run:
    call: cyclone_test_handlers.basic:echo
    input: {v: "${{ run.input.v }}"}
  constant:
    call: cyclone_test_handlers.basic:echo
    input: {k: 1}
"""

CHAIN = """
name: chain
nodes:
  a:
    call: cyclone_test_handlers.basic:echo
  b:
    call: cyclone_test_handlers.basic:echo
    needs: [a]
    input: {got: "${{ nodes.a.output }}"}
"""


def _generic_plan(db: psycopg.Connection[Any], statement: str) -> str:
    """The generic plan of ``statement`` (the plan a prepared statement settles on),
    from ``EXPLAIN (GENERIC_PLAN)`` (Postgres 16+) with its placeholders as ``$n``."""
    names: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        return f"${names.setdefault(m.group(1), len(names) + 1)}"

    text = re.sub(r"%\((\w+)\)s", number, statement)
    rows = db.execute("EXPLAIN (GENERIC_PLAN, COSTS OFF) " + text).fetchall()
    return "\n".join(r[0] for r in rows)


def test_claim_walks_the_claim_index_in_order_without_sorting(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client()
    flow = load_flow_text(ONE)
    with database(client).pool.connection() as conn:
        for i in range(300):
            client.submit_tx(conn, flow, {"i": i})
    db.execute("ANALYZE cyclone_steps")
    if db.info.server_version < 160000:
        pytest.skip("EXPLAIN (GENERIC_PLAN) needs Postgres 16")
    plan = _generic_plan(db, database(client).q["step_claim_if_available"])
    # the range of the steps nobody owns (isolated runs: migrations 0007, 0009)
    assert "Index Scan using cyclone_steps_claim_idx" in plan, plan
    assert "COALESCE(claim_owner, ''::text) = ''::text" in plan, plan
    assert "Sort" not in plan, plan
    # cyclone-flow run's claim is a statement of its own: its run filter never reaches
    # the generic plan of the workers' claim above
    assert (
        "root_run_id" not in plan
        and "root_run_id" in database(client).q["step_claim_in_run_if_available"]
    )


def test_claim_order_and_queue_are_kept(make_client: Callable[..., Client]) -> None:
    client = make_client()
    flow = load_flow_text(ONE)
    low = client.submit(flow, {"n": "low"}, priority=5)
    first = client.submit(flow, {"n": "first"})
    second = client.submit(flow, {"n": "second"})
    other = client.submit(flow, {"n": "other"}, queue="other")
    claimed = claim(client, "x", 30.0, ["default"], 10)
    assert [s.run_id for s in claimed] == [first, second, low]
    both = claim(client, "y", 30.0, ["default", "other"], 10)
    assert [s.run_id for s in both] == [other]


def test_claim_returns_the_run_input_only_when_the_node_may_need_it(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    client.submit(load_flow_text(ROOTS), {"v": 7})
    steps = {s.node: s for s in claim(client, "x", 30.0, ["default"], 10)}
    assert steps["plain"].run_input_text == '{"v": 7}'
    assert steps["from_run"].run_input_text == '{"v": 7}'
    assert steps["constant"].run_input_text is None


def test_a_completion_fills_the_output_cache_of_its_client(
    make_client: Callable[..., Client],
) -> None:
    client = make_client(workers=1)
    run_id = client.submit(load_flow_text(CHAIN), {"x": 1})
    client.start()
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed"
    hit, text = worker_parts(client).cache.get((run_id, "a"))
    assert hit and text == get_step_output_text(client, run_id, "a") == '{"x": 1}'
    assert client.list_steps(run_id)[1].output == {"got": {"x": 1}}

"""Flow-file limits: ``concurrency`` / ``rate_limit`` after ``defaults``, their
groups and keys, and the plan rows that step_insert_plan renders the keys from."""

from __future__ import annotations

import pytest

from cyclone_flow.errors import FlowError
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.flowfile.model import Limit
from cyclone_flow.flowfile.plan import flow_plan

FLOW = """
name: shop
defaults:
  concurrency: {limit: 3}
nodes:
  charge:
    call: m:f
    concurrency: {key: "${{ run.input.customer.id }}", limit: 2, group: payments}
    rate_limit: {key: stripe, limit: 100, per: 1m}
  ship:
    type: fan_out
    call: m:f
    needs: [charge]
    over: [1, 2]
  approve:
    type: wait_signal
    signal: ok
"""


def test_limits_after_defaults_and_their_plan_rows() -> None:
    flow = load_flow_text(FLOW)
    charge, ship, approve = flow.nodes["charge"], flow.nodes["ship"], flow.nodes["approve"]
    assert charge.concurrency == Limit("payments", 2, key_path=("customer", "id"))
    assert charge.rate_limit == Limit("shop.charge", 100, key_value="stripe", per_s=60.0)
    assert ship.concurrency == Limit("shop.ship", 3)  # the default, in the node's own group
    assert approve.concurrency is None  # a wait_signal node has no step to limit
    rows = {n["node"]: n for n in flow_plan(flow, {})["nodes"]}
    assert rows["charge"]["concurrency"] == {
        "group": "payments",
        "limit": 2,
        "path": ["customer", "id"],
    }
    assert rows["charge"]["rate_limit"] == {
        "group": "shop.charge",
        "limit": 100,
        "per_s": 60.0,
        "value": "stripe",
    }
    assert rows["ship"]["concurrency"] == {"group": "shop.ship", "limit": 3}
    assert "concurrency" not in rows["approve"] and "rate_limit" not in rows["approve"]


def test_a_flow_without_limits_has_plan_rows_without_them() -> None:
    flow = load_flow_text("name: plain\nnodes:\n  a: {call: m:f}\n")
    (row,) = flow_plan(flow, {})["nodes"]
    assert "concurrency" not in row and "rate_limit" not in row


@pytest.mark.parametrize(
    ("node", "code"),
    [
        ("concurrency: {limit: 0}", "E003"),
        ("concurrency: {limit: 1.5}", "E003"),
        ("concurrency: {key: k}", "E003"),
        ("rate_limit: {limit: 5}", "E003"),
        ("rate_limit: {limit: 5, per: soon}", "E003"),
        ("rate_limit: {limit: 5, per: 0.0001}", "E007"),
        ("concurrency: {limit: 1, group: 'a/b'}", "E003"),
    ],
)
def test_bad_limits_are_lint_errors(node: str, code: str) -> None:
    with pytest.raises(FlowError) as info:
        load_flow_text(f"name: x\nnodes:\n  a:\n    call: m:f\n    {node}\n")
    assert [p.code for p in info.value.problems] == [code]

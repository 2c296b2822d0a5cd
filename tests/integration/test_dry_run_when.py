"""``submit --dry-run`` (``preview_submit``) shows what submit really does with ``when:``: a
conditional node that submit releases (a root, or a node whose needs are all skipped
under ``on_dep_skip: run``) is decided at submit on the run input, so the plan says
``skipped`` / ``available`` / ``discarded`` as the real run's steps are right after the
submit (no worker runs), and the skip-cascade below a skipped node with it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cyclone_flow import Client
from cyclone_flow.client import preview_submit
from cyclone_flow.flowfile import load_flow_text

H = "cyclone_test_handlers.conditions"
FLOW = f"""
name: dry-when
nodes:
  big: {{call: {H}:value, when: "run.input.n > 1"}}
  small: {{call: {H}:value, when: "run.input.n <= 1"}}
  fan:
    type: fan_out
    call: {H}:value
    over: "${{{{ run.input.items }}}}"
    when: "run.input.n > 1"
  after_big: {{call: {H}:value, needs: [big]}}
  below: {{call: {H}:value, needs: [after_big]}}
  anyway: {{call: {H}:value, needs: [big], on_dep_skip: run, when: "nodes.big.output == null"}}
  later: {{call: {H}:value, needs: [small], when: "nodes.small.output.ok"}}
  plain: {{call: {H}:value}}
"""
BAD = f"""
name: dry-when-bad
nodes:
  bad: {{call: {H}:value, when: "run.input.s > 1"}}
"""


def _real_states(client: Client, run_id: str) -> dict[str, str]:
    return {s.node: str(s.state) for s in client.list_steps(run_id, items=False)}


@pytest.mark.parametrize("n", [1, 2])
def test_the_plan_says_what_submit_leaves(make_client: Callable[..., Client], n: int) -> None:
    client = make_client()  # not started: nothing runs after the submit
    flow = load_flow_text(FLOW)
    run_input = {"n": n, "items": [1, 2]}
    plan = preview_submit(flow, run_input)
    planned = {s.node: s.state for s in plan.steps}
    assert planned == _real_states(client, client.submit(flow, run_input))
    if n == 1:
        assert planned["big"] == "skipped" and planned["small"] == "available"
        assert planned["below"] == "skipped" and planned["anyway"] == "available"
        detail = {s.node: s.detail for s in plan.steps}
        assert detail["big"]["skip_reason"] == {
            "when": "run.input.n > 1",
            "values": {"run.input.n": 1},
        }
        assert detail["below"]["skip_reason"] == {"upstream": "after_big"}
        assert planned["later"] == "pending"  # its when: is decided when small completes
    else:
        assert planned["big"] == "available" and planned["fan"] == "waiting"
        assert planned["later"] == "skipped"  # below the skipped small


def test_a_condition_that_cannot_be_evaluated_is_discarded_at_submit(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    flow = load_flow_text(BAD)
    [step] = preview_submit(flow, {"s": "x"}).steps
    assert step.state == "discarded" and "cannot compare" in str(step.detail["error"])
    assert _real_states(client, client.submit(flow, {"s": "x"})) == {"bad": "discarded"}

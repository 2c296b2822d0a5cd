"""``cyclone_flow.engine.rerun``: the rerun's plan (which nodes run again, which are
reused, what is refused), decided from the rows the rerun read, without a statement."""

from __future__ import annotations

from typing import Any

import pytest

from cyclone_flow.db.rows import RerunSource, RerunStep
from cyclone_flow.engine.rerun import _MISSING, _plan_rerun
from cyclone_flow.errors import RerunRefusedError, RunStateError
from cyclone_flow.states import RunState, StepState

SOURCE = RerunSource("r1", RunState.FAILED, 1, "chain", '{"n": 1}', None, None)
NEEDS = {"b": ["a"], "c": ["b"]}


def _step(node: str, state: StepState, input: Any = None) -> RerunStep:
    return RerunStep(1, node, "action", state, input, None, None)


def _chain(last: StepState = StepState.DISCARDED) -> list[RerunStep]:
    return [
        _step("a", StepState.COMPLETED, {"n": "${{ run.input.n }}"}),
        _step("b", StepState.COMPLETED, {}),
        _step("c", last, {}),
    ]


def _plan(nodes: list[RerunStep], *from_nodes: str, **kw: Any) -> Any:
    options: dict[str, Any] = {"failed": False, "new_input": _MISSING, "force": False}
    options.update(kw)
    return _plan_rerun("r1", SOURCE, nodes, NEEDS, from_nodes, **options)


def test_a_rerun_from_a_node_runs_it_and_its_downstream_and_reuses_the_rest() -> None:
    plan = _plan(_chain(), "b")
    assert plan.rerun == ("b", "c") and [n.node for n in plan.reused] == ["a"]
    assert plan.input == {"n": 1}
    assert _plan(_chain(), failed=True).rerun == ("c",)


def test_the_plan_refuses_what_rerun_refuses() -> None:
    with pytest.raises(RunStateError, match="it has no node 'x'"):
        _plan(_chain(), "x")
    with pytest.raises(RunStateError, match="no node to rerun from"):
        _plan(_chain(StepState.COMPLETED), failed=True)
    unrelated = {"b": ["a"]}  # c needs nothing: a rerun from a would reuse discarded c
    with pytest.raises(RerunRefusedError, match="node 'c' would be reused"):
        _plan_rerun(
            "r1", SOURCE, _chain(), unrelated, ["a"], failed=False, new_input=_MISSING, force=False
        )
    # a new input that node a read: refused, unless forced (then a runs again too)
    with pytest.raises(RerunRefusedError, match="changes what node 'a' read"):
        _plan(_chain(), "c", new_input={"n": 2})
    forced = _plan(_chain(), "c", new_input={"n": 2}, force=True)
    assert forced.rerun == ("a", "b", "c") and forced.input == {"n": 2}

"""``import_wait`` in a flow file: the node's, else ``defaults``', else the
flow's, in seconds on the model and in the plan (only when set: the plan of a flow
without it is unchanged); lint refuses a bad duration. And the worker's per-call backoff
of calls it could not import."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cyclone_flow.errors import FlowError
from cyclone_flow.flowfile import lint_paths, load_flow_text
from cyclone_flow.flowfile.plan import flow_plan
from cyclone_flow.worker.give_back import CallBackoff

FLOW = """
name: waits
import_wait: 1m
defaults: {import_wait: 30s}
nodes:
  own: {call: 'm:f', import_wait: 2s}
  default: {call: 'm:f'}
"""


def test_the_node_wins_over_defaults_over_the_flow() -> None:
    flow = load_flow_text(FLOW)
    assert flow.nodes["own"].import_wait_s == 2.0
    assert flow.nodes["default"].import_wait_s == 30.0
    top = load_flow_text("name: t\nimport_wait: 1m\nnodes: {a: {call: 'm:f'}}\n")
    assert top.nodes["a"].import_wait_s == 60.0
    rows = {r["node"]: r for r in flow_plan(flow, {})["nodes"]}
    assert rows["own"]["import_wait_s"] == 2.0 and rows["default"]["import_wait_s"] == 30.0
    plain = load_flow_text("name: p\nnodes: {a: {call: 'm:f'}}\n")
    assert plain.nodes["a"].import_wait_s is None
    assert "import_wait_s" not in flow_plan(plain, {})["nodes"][0]


@pytest.mark.parametrize(
    ("value", "message"),
    [("0s", "must be longer than 0s"), ("400d", "longer than the maximum"), ("soon", "duration")],
)
def test_lint_refuses_a_bad_import_wait(tmp_path: Path, value: str, message: str) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(
        f"name: f\nimport_wait: {value}\nnodes:\n  a: {{call: 'm:f', import_wait: 1s}}\n"
    )
    problems = lint_paths([str(path)])
    assert any("import_wait" in p.message and message in p.message for p in problems), problems
    with pytest.raises(FlowError):
        load_flow_text(path.read_text())


def test_a_call_is_skipped_for_a_window_that_doubles_until_it_imports() -> None:
    backoff = CallBackoff()
    assert backoff.skipped("m:f") is None and backoff.calls() == []
    assert backoff.note("m:f", "no live worker can import m:f: worker w: ...") == 1.0
    assert (
        backoff.skipped(
            "m:f",
        )
        == "no live worker can import m:f: worker w: ..."
    )
    assert backoff.calls() == ["m:f"] and backoff.failed_before("m:f")
    assert backoff.note("m:f", "again") == 2.0
    assert [backoff.note("m:f", "again") for _ in range(5)] == [4.0, 8.0, 16.0, 30.0, 30.0]
    backoff._calls["m:f"] = (time.monotonic() - 1, 30.0, "again")  # its window ended
    assert backoff.skipped("m:f") is None and backoff.calls() == []
    backoff.imported("m:f")
    assert not backoff.failed_before("m:f") and backoff.note("m:f", "x") == 1.0


def test_lint_refuses_import_wait_on_a_node_without_a_handler(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("name: f\nnodes:\n  s: {type: wait_signal, signal: go, import_wait: 1m}\n")
    problems = lint_paths([str(path)])
    assert any(
        "import_wait" in p.message
        and "only allowed on nodes with type: action or fan_out" in p.message
        for p in problems
    ), problems

"""The ``when:`` expression language (parse, evaluate, never ``eval``), its lint (W002,
W003; E018/E019 have fixtures) and what the flow pipeline keeps of it (model, plan)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cyclone_flow.describe import describe_skip
from cyclone_flow.errors import TemplateError
from cyclone_flow.flowfile import lint_paths, load_flow_text
from cyclone_flow.flowfile.condition import (
    ConditionError,
    ConditionSyntaxError,
    parse_condition,
)
from cyclone_flow.flowfile.plan import flow_plan
from cyclone_flow.flowfile.template import SKIPPED, render


def _eval(text: str, run_input: Any = None, outputs: dict[str, Any] | None = None) -> bool:
    return parse_condition(text).evaluate(run_input, lambda n: (outputs or {}).get(n))[0]


@pytest.mark.parametrize(
    ("text", "run_input", "expected"),
    [
        ("run.input.a == 1", {"a": 1}, True),
        ("run.input.a != 1", {"a": 1}, False),
        ("run.input.a == true", {"a": 1}, False),  # true is not 1
        ("run.input.a == 1.0", {"a": 1}, True),
        ("run.input.a > 2 and run.input.a <= 3", {"a": 3}, True),
        ("run.input.s < 'b'", {"s": "a"}, True),
        ("not run.input.a", {"a": 0}, True),
        ("not not run.input.a", {"a": []}, False),
        ("run.input.a or run.input.b", {"a": "", "b": {"k": 1}}, True),
        ("(run.input.a or run.input.b) and run.input.c", {"a": 1, "c": None}, False),
        ("run.input.x in [1, 2, 3]", {"x": 2}, True),
        ("run.input.x not in [1, 2, 3]", {"x": 2}, False),
        ("'ell' in run.input.s", {"s": "hello"}, True),
        ("'k' in run.input.m", {"m": {"k": 1}}, True),
        ("run.input.missing == null", {}, True),
        ("run.input.missing.deeper.0 == null", {"missing": None}, True),
        ("run.input.l.1 == 'b'", {"l": ["a", "b"]}, True),
        ("run.input.l.5 == null", {"l": ["a"]}, True),
        ("run.input.missing > 3", {}, False),  # ordering with null is false
        ("run.input.missing < 3", {}, False),
        ("1 in run.input.missing", {}, False),
        ("run.input == {'a': 1}".replace("{'a': 1}", "null"), None, True),
        ("${{ run.input.a == 'x' }}", {"a": "x"}, True),
        ("${{ run.input.a }} == ${{ run.input.b }}", {"a": [1], "b": [1]}, True),
        ("true", None, True),
        ("false or null", None, False),
        ("-1.5e1 < run.input.a", {"a": 0}, True),
        ("run.input.s == 'it\\'s'", {"s": "it's"}, True),
        ("run.input.my-key == 1", {"my-key": 1}, True),
    ],
)
def test_evaluation(text: str, run_input: Any, expected: bool) -> None:
    assert _eval(text, run_input) is expected


def test_node_outputs_and_recorded_values() -> None:
    condition = parse_condition("nodes.a.output.ok and nodes.b.output.n >= run.input.min")
    assert condition.nodes() == ["a", "b"]
    holds, values = condition.evaluate({"min": 3}, {"a": {"ok": True}, "b": {"n": 2}}.__getitem__)
    assert holds is False
    assert values == {"nodes.a.output.ok": True, "nodes.b.output.n": 2, "run.input.min": 3}
    # a skipped node's output is null: every path into it too
    assert _eval("nodes.s.output.x.y == null", None, {"s": None}) is True


def test_short_circuit_reads_only_what_it_needs() -> None:
    read: list[str] = []

    def upstream(name: str) -> Any:
        read.append(name)
        return {"v": 1}

    parse_condition("run.input.a or nodes.b.output.v").evaluate({"a": True}, upstream)
    assert read == []


@pytest.mark.parametrize(
    ("text", "message", "offset"),
    [
        ("", "expected an expression", 0),
        ("run.input.a = 1", "'=' is not an operator: use '=='", 12),
        ("run.input.a ==", "expected a value", 14),
        ("run.input.a and", "expected a value", 15),
        ("(run.input.a", "expected ')'", 12),
        ("[1, 2", "expected ',' or ']'", 5),
        ("run.input.a b", "expected 'and', 'or' or the end", 12),
        ("heads", "'heads' is not a reference", 0),
        ("nodes.a.outputs", "'nodes.a.outputs' is not a reference", 0),
        ("item.x == 1", "'item' is not allowed", 0),
        ("'open", "unterminated string", 0),
        ("${{ run.input.a", "unclosed '${{'", 0),
        ("run.input.a not 1", "'in' after 'not'", 16),
        ("run.input.a ! 1", "unexpected character '!'", 12),
        ("'\\q'", "unknown escape", 1),
        ("__import__('os').system('x')", "unexpected character '.'", 16),
        ("__import__('os')", "'__import__' is not a reference", 0),
        ("run.input.a; 1", "unexpected character ';'", 11),
    ],
)
def test_syntax_errors_name_the_problem_and_its_offset(
    text: str, message: str, offset: int
) -> None:
    with pytest.raises(ConditionSyntaxError) as info:
        parse_condition(text)
    assert message in info.value.message
    assert info.value.offset == offset


@pytest.mark.parametrize(
    ("text", "run_input", "message"),
    [
        ("run.input.a < 1", {"a": "x"}, "cannot compare a string with a number using '<'"),
        ("run.input.a > [1]", {"a": [0]}, "cannot compare a list with a list"),
        ("1 in run.input.s", {"s": "abc"}, "'in' a string needs a string"),
        ("1 in run.input.n", {"n": 5}, "'in' needs a list, a string or a mapping"),
    ],
)
def test_evaluation_errors_are_typed(text: str, run_input: Any, message: str) -> None:
    with pytest.raises(ConditionError) as info:
        _eval(text, run_input)
    assert message in str(info.value)
    assert isinstance(info.value, TemplateError)


def test_describe_skip() -> None:
    assert describe_skip({"upstream": "a"}) == "skipped: upstream a was skipped"
    text = describe_skip({"when": "run.input.x > 1", "values": {"run.input.x": None}})
    assert text == "skipped: when 'run.input.x > 1' was false (run.input.x = null)"


def test_render_gives_null_for_every_reference_into_a_skipped_node() -> None:
    template = {"a": "${{ nodes.s.output.deep.0 }}", "b": "${{ nodes.s.output }}", "c": 1}
    assert render(template, None, lambda n: SKIPPED) == {"a": None, "b": None, "c": 1}
    with pytest.raises(TemplateError):  # a completed node's null output keeps its rule
        render(template, None, lambda n: None)


FLOW = """
name: cond
defaults: {on_dep_skip: run}
nodes:
  a: {call: "m:f", when: "run.input.go"}
  b: {call: "m:f", needs: [a], on_dep_skip: skip}
  c: {call: "m:f", needs: [a], when: false}
  d: {call: "m:f", needs: [a]}
"""


def test_model_and_plan_keep_when_and_on_dep_skip_only_where_set() -> None:
    flow = load_flow_text(FLOW)
    nodes = flow.nodes
    assert (nodes["a"].when, nodes["a"].on_dep_skip) == ("run.input.go", "run")
    assert (nodes["b"].when, nodes["b"].on_dep_skip) == (None, "skip")
    assert nodes["c"].when == "false"
    plan = {n["node"]: n for n in flow_plan(flow, {})["nodes"]}
    assert plan["a"]["when"] == "run.input.go" and plan["a"]["on_dep_skip"] == "run"
    assert "when" not in plan["b"] and "on_dep_skip" not in plan["b"]
    plain = load_flow_text("name: p\nnodes:\n  a: {call: 'm:f'}\n")
    (node,) = flow_plan(plain, {})["nodes"]
    assert "when" not in node and "on_dep_skip" not in node  # unchanged for other flows


def _lint(tmp_path: Path, text: str) -> list[tuple[str, int, int]]:
    path = tmp_path / "flow.yaml"
    path.write_text(text)
    return sorted((p.code, p.line, p.col) for p in lint_paths([str(path)]))


def test_w002_a_reader_that_may_run_when_its_source_is_skipped(tmp_path: Path) -> None:
    text = """name: w
nodes:
  check: {call: "m:f"}
  ship: {call: "m:f", needs: [check], when: "nodes.check.output.ok"}
  label:
    call: m:f
    needs: [ship]
    input: {id: "${{ nodes.ship.output.id }}"}
  report:
    call: m:f
    needs: [ship]
    on_dep_skip: run
    input: {id: "${{ nodes.ship.output.id }}"}
  audit:
    call: m:f
    needs: [report]
    on_dep_skip: run
    input: {id: "${{ nodes.ship.output.id }}"}
  deep:
    type: fan_out
    call: m:f
    needs: [report]
    over: "${{ nodes.ship.output.items }}"
"""
    # label: skipped with ship (cascade); report: asked for null; audit and deep: W002
    assert _lint(tmp_path, text) == [("W002", 18, 17), ("W002", 23, 11)]


def test_w003_types_that_cannot_match(tmp_path: Path) -> None:
    text = """name: w
input_schema:
  type: object
  properties:
    n: {type: integer}
    s: {type: [string, "null"]}
nodes:
  a: {call: "m:f", when: "run.input.n == 'x'"}
  b: {call: "m:f", when: "run.input.s == 1 or run.input.s == null or run.input.s == 'y'"}
  c: {call: "m:f", when: "run.input.n > true"}
  d: {call: "m:f", when: "run.input.n != 2 and run.input.other == 'x'"}
"""
    assert _lint(tmp_path, text) == [("W003", 8, 39), ("W003", 9, 39), ("W003", 10, 39)]


def test_a_clean_conditional_flow_lints_clean(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    assert lint_paths([str(root / "examples" / "flows" / "orders.yaml")]) == []
    assert _lint(tmp_path, FLOW) == []

"""The state colours agree everywhere: the dashboard's stylesheet, its legend and
``graph --run`` (DOT and Mermaid) use :data:`cyclone_flow.states.STATE_COLOURS`."""

from __future__ import annotations

import re
from pathlib import Path

from cyclone_flow.flowfile import load_flow_text, to_dot, to_mermaid
from cyclone_flow.states import STATE_COLOURS, StepState

CSS = Path(__file__).parents[2] / "cyclone_flow" / "ui" / "static" / "ui.css"
FLOW = load_flow_text(
    "name: g\nnodes:\n  a: {call: m:f}\n"
    "  b: {call: m:f, needs: [a]}\n  c: {call: m:f, needs: [a]}\n"
)


def test_every_step_state_has_a_colour() -> None:
    assert set(STATE_COLOURS) == {str(s) for s in StepState}


def test_the_stylesheet_uses_the_palette() -> None:
    css = CSS.read_text("utf-8")
    for state, colour in STATE_COLOURS.items():
        rule = re.search(rf"\.state-{state}\b[^{{]*\{{([^}}]*)\}}", css)
        assert rule, f"ui.css: no .state-{state}"
        assert f"fill: {colour}" in rule.group(1), state


def test_graph_fills_nodes_with_their_state_colour() -> None:
    states = {"a": "completed", "b": "running", "c": "pending"}
    dot = to_dot(FLOW, None, states)
    assert (
        f'"a" [label="a\\nm:f", shape=box, style=filled, fillcolor="{STATE_COLOURS["completed"]}"];'
        in dot
    )
    mermaid = to_mermaid(FLOW, None, states)
    assert f"    classDef running fill:{STATE_COLOURS['running']},stroke:#555,color:#111" in mermaid
    assert "    class a completed\n" in mermaid and "    class c pending\n" in mermaid
    assert "classDef" not in to_mermaid(FLOW) and "fillcolor" not in to_dot(FLOW)

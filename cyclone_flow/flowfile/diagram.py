"""Render a flow's DAG as Mermaid or Graphviz DOT text (an edge ``a -> b``: b needs a).

``notes`` (node name -> text) adds a line to a node's label: ``graph --run`` shows each
node's state there, with item progress for fan-out nodes, the child run for child nodes
and the awaited signal for wait_signal nodes. ``states`` (node name -> step state) fills
each node with the colour of its state (:data:`cyclone_flow.states.STATE_COLOURS`, the
dashboard's legend).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cyclone_flow.flowfile.model import Flow, Node
from cyclone_flow.states import STATE_COLOURS

__all__ = ["to_dot", "to_mermaid"]

_MERMAID_SHAPES = {
    "action": ('["', '"]'),
    "fan_out": ('[["', '"]]'),
    "child": ('[/"', '"/]'),
    "wait_signal": ('{{"', '"}}'),
}


def _label(node: Node, notes: Mapping[str, str] | None = None) -> str:
    detail = node.call or node.options.get("flow") or node.options.get("signal") or ""
    kind = "" if node.type == "action" else f"{node.type} "
    label = f"{node.name}\n{kind}{detail}".strip()
    note = (notes or {}).get(node.name)
    return f"{label}\n{note}" if note else label


def to_mermaid(
    flow: Flow, notes: Mapping[str, str] | None = None, states: Mapping[str, str] | None = None
) -> str:
    """Mermaid ``flowchart TD`` text; node shapes show the type (fan_out: subroutine,
    child: parallelogram, wait_signal: hexagon); with ``states``, one ``classDef`` per
    state used and each node in the class of its state."""
    lines = ["flowchart TD"]
    for node in flow.nodes.values():
        left, right = _MERMAID_SHAPES[node.type]
        label = (
            _label(node, notes)
            .replace("#", "#35;")
            .replace('"', "#quot;")
            .replace("<", "#lt;")
            .replace(">", "#gt;")
            .replace("\n", "<br/>")
        )
        lines.append(f"    {node.name}{left}{label}{right}")
    for node in flow.nodes.values():
        lines.extend(f"    {need} --> {node.name}" for need in node.needs)
    used = {s for n, s in (states or {}).items() if n in flow.nodes and s in STATE_COLOURS}
    for state in (s for s in STATE_COLOURS if s in used):
        lines.append(f"    classDef {state} fill:{STATE_COLOURS[state]},stroke:#555,color:#111")
        members = [n for n in flow.nodes if (states or {}).get(n) == state]
        lines.append(f"    class {','.join(members)} {state}")
    return "\n".join(lines) + "\n"


def to_dot(
    flow: Flow, notes: Mapping[str, str] | None = None, states: Mapping[str, str] | None = None
) -> str:
    """Graphviz DOT ``digraph`` text (node and graph names quoted as JSON strings); with
    ``states``, each node filled with the colour of its state."""
    lines = [f"digraph {json.dumps(flow.name)} {{", "    rankdir=TB;"]
    for node in flow.nodes.values():
        shape = {"action": "box", "fan_out": "box3d", "child": "component"}.get(
            node.type, "hexagon"
        )
        colour = STATE_COLOURS.get((states or {}).get(node.name, ""))
        fill = f', style=filled, fillcolor="{colour}"' if colour else ""
        lines.append(
            f"    {json.dumps(node.name)} [label={json.dumps(_label(node, notes))}, "
            f"shape={shape}{fill}];"
        )
    for node in flow.nodes.values():
        lines.extend(f"    {json.dumps(need)} -> {json.dumps(node.name)};" for need in node.needs)
    lines.append("}")
    return "\n".join(lines) + "\n"

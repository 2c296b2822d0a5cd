"""Render a flow's DAG as Mermaid or Graphviz DOT text (an edge ``a -> b``: b needs a).

``notes`` (node name -> text) adds a line to a node's label: ``graph --run`` shows each
node's state there, with item progress for fan-out nodes, the child run for child nodes
and the awaited signal for wait_signal nodes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cyclone_flow.flowfile.model import Flow, Node

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


def to_mermaid(flow: Flow, notes: Mapping[str, str] | None = None) -> str:
    """Mermaid ``flowchart TD`` text; node shapes show the type (fan_out: subroutine,
    child: parallelogram, wait_signal: hexagon)."""
    lines = ["flowchart TD"]
    for node in flow.nodes.values():
        left, right = _MERMAID_SHAPES[node.type]
        label = _label(node, notes).replace('"', "#quot;").replace("\n", "<br/>")
        lines.append(f"    {node.name}{left}{label}{right}")
    for node in flow.nodes.values():
        lines.extend(f"    {need} --> {node.name}" for need in node.needs)
    return "\n".join(lines) + "\n"


def to_dot(flow: Flow, notes: Mapping[str, str] | None = None) -> str:
    """Graphviz DOT ``digraph`` text (node and graph names quoted as JSON strings)."""
    lines = [f"digraph {json.dumps(flow.name)} {{", "    rankdir=TB;"]
    for node in flow.nodes.values():
        shape = {"action": "box", "fan_out": "box3d", "child": "component"}.get(
            node.type, "hexagon"
        )
        lines.append(
            f"    {json.dumps(node.name)} [label={json.dumps(_label(node, notes))}, shape={shape}];"
        )
    for node in flow.nodes.values():
        lines.extend(f"    {json.dumps(need)} -> {json.dumps(node.name)};" for need in node.needs)
    lines.append("}")
    return "\n".join(lines) + "\n"

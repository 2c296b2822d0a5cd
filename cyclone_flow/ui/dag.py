"""The DAG of a flow drawn as SVG on the server: every node of the stored definition, a
fan-out node as one box with its item counts, coloured by the state of its step.

Layout: the nodes in columns by dependency depth (``networkx.topological_generations``),
each moved right up to the column before its first dependent (so no edge runs under the
boxes between), ordered in a column by the mean row of their needs (fewer crossings),
edges as curves from a need to its dependent. Linear in nodes + edges, so a 2,000-node
flow is one SVG the browser draws at once. Every text is escaped (:func:`markupsafe.escape`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
from markupsafe import Markup, escape

from cyclone_flow.db.rows import Step

__all__ = ["LEGEND", "DagNode", "dag_nodes", "render_svg"]

NODE_W = 220
"""Width of a node box (px)."""
NODE_H = 46
"""Height of a node box (px)."""
GAP_X = 60
"""Horizontal gap between two columns (px)."""
GAP_Y = 16
"""Vertical gap between two boxes of a column (px)."""
NAME_CHARS = 26
"""Characters of a node name shown in its box (the whole name is its tooltip)."""
DETAIL_CHARS = 36
"""Characters of the second line of a box (type, call or item counts) shown."""

LEGEND: tuple[tuple[str, str], ...] = (
    ("pending", "not started: waits for its needs"),
    ("available", "ready: waits for a worker (or its retry delay)"),
    ("running", "held by a worker"),
    ("waiting", "fan-out items, child run or signal under way"),
    ("completed", "done"),
    ("discarded", "failed for good"),
    ("cancelled", "cancelled"),
    ("skipped", "not run: its when: was false, or a node it needs was skipped"),
)
"""The step states in the order of the legend, with what each means (the colours are the
``state-<name>`` classes of ``static/ui.css``)."""


@dataclass(frozen=True)
class DagNode:
    """One node to draw: ``state`` is its step's state (``none`` on a flow's page),
    ``detail`` the second line (type, item counts, signal), ``needs`` its upstream
    nodes."""

    name: str
    type: str
    needs: tuple[str, ...]
    state: str
    detail: str
    child_run_id: str | None = None


def _definition_nodes(definition: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    nodes = definition.get("nodes")
    if not isinstance(nodes, Mapping):
        return {}
    return {str(k): (v if isinstance(v, Mapping) else {}) for k, v in nodes.items()}


def _needs(doc: Mapping[str, Any]) -> tuple[str, ...]:
    needs = doc.get("needs") or ()
    if isinstance(needs, str):
        return (needs,)
    return tuple(str(n) for n in needs) if isinstance(needs, list | tuple) else ()


def _type_detail(doc: Mapping[str, Any]) -> tuple[str, str]:
    kind = str(doc.get("type") or "action")
    if kind == "wait_signal":
        return kind, f"signal {doc.get('signal', '')}"
    if kind == "child":
        return kind, f"child {doc.get('flow', '')}"
    call = str(doc.get("call") or "")
    return kind, call.rsplit(":", 1)[-1] if call else kind


def _fan_out_detail(step: Step, counts: Mapping[str, int]) -> str:
    if step.items_total is None:
        return "fan-out: not started"
    text = f"{counts.get('completed', 0)}/{step.items_total} done"
    if counts.get("running"):
        text += f" · {counts['running']} running"
    if counts.get("discarded"):
        text += f" · {counts['discarded']} failed"
    if counts.get("cancelled"):
        text += f" · {counts['cancelled']} cancelled"
    return text


def dag_nodes(
    definition: Mapping[str, Any],
    steps: Sequence[Step] = (),
    progress: Mapping[str, Mapping[str, int]] | None = None,
) -> list[DagNode]:
    """The nodes of ``definition`` (a stored flow document) with the state of their step
    in ``steps`` (top-level steps of one run; none: a flow's page) and the fan-out item
    counts of ``progress`` (node -> step state -> count). Nodes come in the order of the
    steps (file order), then the rest of the definition's."""
    docs = _definition_nodes(definition)
    by_node = {s.node: s for s in steps if s.parent_node is None}
    order = [n for n in by_node if n in docs] + [n for n in docs if n not in by_node]
    out: list[DagNode] = []
    for name in order:
        doc = docs[name]
        kind, detail = _type_detail(doc)
        step = by_node.get(name)
        state = "none" if not steps else "pending"
        child = None
        if step is not None:
            state = str(step.state)
            child = step.child_run_id
            if step.type == "fan_out":
                detail = _fan_out_detail(step, (progress or {}).get(name, {}))
            elif step.type == "wait_signal" and step.state == "waiting":
                detail = f"awaits {step.signal}"
            if step.state == "skipped":
                detail = "skipped, reused" if step.reused_from is not None else "skipped"
            elif step.reused_from is not None:
                detail = "reused"
        needs = tuple(n for n in _needs(doc) if n in docs)
        out.append(DagNode(name, kind, needs, state, detail, child))
    return out


def _layout(nodes: Sequence[DagNode]) -> dict[str, tuple[int, int]]:
    """Column and row of each node."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(n.name for n in nodes)
    for node in nodes:
        graph.add_edges_from((need, node.name) for need in node.needs)
    rank = {n.name: i for i, n in enumerate(nodes)}
    try:
        generations = list(nx.topological_generations(graph))
        order = list(nx.topological_sort(graph))
    except nx.NetworkXUnfeasible:  # not a DAG (a stored flow always is): one column
        generations, order = [[n.name for n in nodes]], []
    column = {name: col for col, names in enumerate(generations) for name in names}
    if order:
        # as late as its first dependent allows: a node next to what needs it, so an edge
        # does not run under the boxes of the columns between them
        for name in reversed(order):
            after = [column[s] for s in graph.successors(name)]
            if after:
                column[name] = max(column[name], min(after) - 1)
    columns: list[list[str]] = [[] for _ in range(max(column.values(), default=0) + 1)]
    for name in sorted(column, key=rank.__getitem__):
        columns[column[name]].append(name)
    place: dict[str, tuple[int, int]] = {}
    for col, names in enumerate(columns):

        def key(name: str) -> tuple[float, int]:
            rows = [place[p][1] for p in graph.predecessors(name) if p in place]
            return (sum(rows) / len(rows) if rows else float("inf"), rank[name])

        for row, name in enumerate(sorted(names, key=key)):
            place[name] = (col, row)
    return place


def render_svg(nodes: Sequence[DagNode], href: Callable[[DagNode], str | None]) -> Markup:
    """The SVG picture of ``nodes``: a box per node (class ``state-<state>``, attributes
    ``data-node`` and ``data-state``) linking to ``href(node)`` (None: no link), and an
    arrow per need. Safe to embed in HTML: every text is escaped."""
    place = _layout(nodes)
    cols = max((c for c, _ in place.values()), default=0) + 1
    rows = max((r for _, r in place.values()), default=0) + 1
    width = cols * NODE_W + (cols - 1) * GAP_X + 8
    height = rows * NODE_H + (rows - 1) * GAP_Y + 8

    def xy(name: str) -> tuple[int, int]:
        col, row = place[name]
        return 4 + col * (NODE_W + GAP_X), 4 + row * (NODE_H + GAP_Y)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dag" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="the flow\'s graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'class="arrowhead"/></marker></defs>',
    ]
    for node in nodes:
        tx, ty = xy(node.name)
        for need in node.needs:
            sx, sy = xy(need)
            x1, y1, x2, y2 = sx + NODE_W, sy + NODE_H // 2, tx, ty + NODE_H // 2
            mid = (x1 + x2) // 2
            parts.append(
                f'<path class="edge" d="M {x1} {y1} C {mid} {y1}, {mid} {y2}, {x2} {y2}" '
                'marker-end="url(#arrow)"/>'
            )
    for node in nodes:
        x, y = xy(node.name)
        name = escape(node.name)
        shown = node.name if len(node.name) <= NAME_CHARS else node.name[: NAME_CHARS - 1] + "…"
        detail = (
            node.detail
            if len(node.detail) <= DETAIL_CHARS
            else node.detail[: DETAIL_CHARS - 1] + "…"
        )
        state = escape(node.state)
        box = (
            f'<g class="node state-{state} type-{escape(node.type)}" data-node="{name}" '
            f'data-state="{state}"><title>{name} ({escape(node.type)}): {state}'
            f"{' — ' + escape(node.detail) if node.detail else ''}</title>"
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="7"/>'
            f'<text x="{x + 10}" y="{y + 19}" class="name">{escape(shown)}</text>'
            f'<text x="{x + 10}" y="{y + 36}" class="detail">{escape(detail)}</text></g>'
        )
        link = href(node)
        parts.append(f'<a href="{escape(link)}">{box}</a>' if link else box)
    parts.append("</svg>")
    return Markup("".join(parts))

"""Semantic checks of a parsed flow that the JSON Schema cannot express.

The checks tolerate a document that failed the schema: they skip the parts whose shape
is wrong (the schema reports those), so one run reports as much as possible.

Codes: E007 (duration or backoff out of range), E010 (dependency cycle), E011 (unknown
``needs``), E012 (a node needs itself), E013 (reference to a node that is not an
ancestor), E014 (reference to an unknown node), E016 (malformed ``${{`` expression).
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from cyclone_flow.durations import format_duration, parse_duration
from cyclone_flow.errors import Problem, TemplateError
from cyclone_flow.spec.source import Document, JsonPath
from cyclone_flow.spec.template import find_strings, parse_ref

__all__ = ["check_document", "dependency_graph"]


def _nodes(doc: Document) -> dict[str, dict[str, Any]]:
    data = doc.data
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, dict):
        return {}
    return {name: node for name, node in nodes.items() if isinstance(node, dict)}


def _needs(node: dict[str, Any]) -> list[tuple[int, str]]:
    needs = node.get("needs")
    if not isinstance(needs, list):
        return []
    return [(i, n) for i, n in enumerate(needs) if isinstance(n, str)]


def dependency_graph(nodes: dict[str, dict[str, Any]]) -> nx.DiGraph:
    """The DAG of ``nodes`` (name -> node mapping): an edge ``a -> b`` when ``b`` needs ``a``.

    Unknown names and self-dependencies are left out.
    """
    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    for name, node in nodes.items():
        for _, need in _needs(node):
            if need in nodes and need != name:
                graph.add_edge(need, name)
    return graph


def check_document(doc: Document) -> list[Problem]:
    """Every semantic problem of ``doc``, sorted by position."""
    nodes = _nodes(doc)
    problems: list[Problem] = []
    problems += _check_needs(doc, nodes)
    graph = dependency_graph(nodes)
    problems += _check_cycles(doc, nodes, graph)
    problems += _check_refs(doc, nodes, graph)
    problems += _check_durations(doc, nodes)
    return sorted(set(problems), key=lambda p: (p.line, p.col, p.code, p.message))


def _check_needs(doc: Document, nodes: dict[str, dict[str, Any]]) -> list[Problem]:
    out = []
    for name, node in nodes.items():
        for index, need in _needs(node):
            pos = doc.value_pos(("nodes", name, "needs", index))
            if need == name:
                out.append(doc.problem(pos, "E012", f"node {name!r} needs itself"))
            elif need not in nodes:
                out.append(
                    doc.problem(pos, "E011", f"node {name!r} needs {need!r}, which is not a node")
                )
    return out


def _check_cycles(
    doc: Document, nodes: dict[str, dict[str, Any]], graph: nx.DiGraph
) -> list[Problem]:
    order = {name: i for i, name in enumerate(nodes)}
    out = []
    for component in nx.strongly_connected_components(graph):
        if len(component) < 2:
            continue
        first = min(component, key=order.__getitem__)
        edges = nx.find_cycle(graph.subgraph(component), source=first)
        cycle = [u for u, _ in edges]
        # rotate so the report starts at the first node in file order
        start = cycle.index(first) if first in cycle else 0
        cycle = cycle[start:] + cycle[:start]
        text = " -> ".join([*cycle, cycle[0]])
        # point at the `needs` entry of the cycle's first node naming its predecessor
        pred = cycle[-1]
        index = next((i for i, n in _needs(nodes[cycle[0]]) if n == pred), None)
        where: JsonPath = ("nodes", cycle[0], "needs")
        pos = doc.value_pos((*where, index)) if index is not None else doc.key_pos(where)
        out.append(
            doc.problem(
                pos, "E010", f"dependency cycle: {text} (each node needs the one before it)"
            )
        )
    return out


def _check_refs(
    doc: Document, nodes: dict[str, dict[str, Any]], graph: nx.DiGraph
) -> list[Problem]:
    out: list[Problem] = []
    for name, node in nodes.items():
        ancestors = nx.ancestors(graph, name) if name in graph else set()
        for key in ("input", "over"):
            if key not in node:
                continue
            for path, text in find_strings(node[key], ("nodes", name, key)):
                pos = doc.value_pos(path)
                try:
                    ref = parse_ref(text)
                except TemplateError as exc:
                    out.append(doc.problem(pos, "E016", str(exc)))
                    continue
                if ref is None or ref.node is None:
                    continue
                if ref.node not in nodes:
                    out.append(
                        doc.problem(
                            pos,
                            "E014",
                            f"{text!r} refers to node {ref.node!r}, which is not a node",
                        )
                    )
                elif ref.node not in ancestors:
                    out.append(
                        doc.problem(
                            pos,
                            "E013",
                            f"{text!r} in node {name!r} refers to node {ref.node!r}, which is "
                            f"not an ancestor: add it to needs (directly or through another node)",
                        )
                    )
    data = doc.data if isinstance(doc.data, dict) else {}
    schedules = data.get("schedules")
    if isinstance(schedules, list):
        for i, schedule in enumerate(schedules):
            if isinstance(schedule, dict) and "input" in schedule:
                for path, text in find_strings(schedule["input"], ("schedules", i, "input")):
                    out.append(
                        doc.problem(
                            doc.value_pos(path),
                            "E016",
                            f"{text!r}: references are not allowed in a schedule's input",
                        )
                    )
    return out


def _duration(value: Any) -> float | None:
    try:
        return parse_duration(value)
    except ValueError:
        return None  # the schema reports it


def _check_durations(doc: Document, nodes: dict[str, dict[str, Any]]) -> list[Problem]:
    out: list[Problem] = []
    data = doc.data if isinstance(doc.data, dict) else {}
    holders: list[tuple[JsonPath, Any]] = [(("defaults",), data.get("defaults"))]
    holders += [(("nodes", name), node) for name, node in nodes.items()]
    for where, holder in holders:
        if not isinstance(holder, dict):
            continue
        for key in ("timeout", "max_wait"):
            if key in holder and isinstance(holder[key], str):
                seconds = _duration(holder[key])
                if seconds == 0:
                    out.append(
                        doc.problem(
                            doc.value_pos((*where, key)),
                            "E007",
                            f"{'.'.join(map(str, (*where, key)))}: must be longer than 0s",
                        )
                    )
        retry = holder.get("retry")
        backoff = retry.get("backoff") if isinstance(retry, dict) else None
        if isinstance(backoff, dict) and "initial" in backoff and "max" in backoff:
            initial, most = _duration(backoff["initial"]), _duration(backoff["max"])
            if initial is not None and most is not None and initial > most:
                label = ".".join(map(str, (*where, "retry", "backoff")))
                out.append(
                    doc.problem(
                        doc.value_pos((*where, "retry", "backoff", "initial")),
                        "E007",
                        f"{label}: initial ({format_duration(initial)}) is longer than "
                        f"max ({format_duration(most)})",
                    )
                )
    return out

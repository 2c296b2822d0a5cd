"""Semantic checks of a parsed flow that the JSON Schema cannot express.

The checks tolerate a document that failed the schema: they skip the parts whose shape is
wrong (the schema reports those), so one run reports as much as possible.

Codes: E007 (duration or backoff out of range: zero, shorter than 1ms, longer than 366 days,
backoff initial > max), E008 (a string Postgres cannot store: NUL, lone surrogate), E010
(dependency cycle), E011 (unknown ``needs``), E012 (a node needs itself), E013 (reference to
a node that is not an ancestor), E014 (reference to an unknown node), E016 (malformed
``${{`` expression), E017 (``${{ item }}`` outside the ``input`` of a fan_out node), E050
(invalid cron expression), E051 (unknown time zone), E052 (two schedules with one name),
E053 (a schedule's input the flow's input_schema refuses: :func:`check_schedule_inputs`, run
by the loader once nothing else is wrong), W001 (a warning: ``${{ run.input.x }}`` where
``input_schema`` neither requires ``x`` nor gives it a default), E018 (a ``when:`` that does
not parse), E019 (a ``when:`` reference to a node that is not an ancestor, or not a node),
W002 (a template reads the output of a node that can be skipped while the reader can still
run: it gets null), W003 (a ``when:`` comparison whose types do not match what
``input_schema`` says, or an order comparison with a literal that is not a number or a
string), E026 (a ``concurrency`` / ``rate_limit`` key that refers to something other than
the run input or an ancestor's output). Child-flow checks (E030-E032) live in
:mod:`cyclone_flow.flowfile.children`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from croniter import CroniterBadDateError, croniter

from cyclone_flow.cron import cron_problem
from cyclone_flow.durations import (
    DURATION_PATTERN,
    MAX_FLOW_DURATION_S,
    MIN_FLOW_DURATION_S,
    format_duration,
    parse_duration,
)
from cyclone_flow.errors import InputValidationError, Problem, TemplateError, shown
from cyclone_flow.flowfile.condition import (
    Condition,
    ConditionSyntaxError,
    literal_kinds,
    parse_condition,
)
from cyclone_flow.flowfile.inputs import InputValidator
from cyclone_flow.flowfile.read import Document, JsonPath
from cyclone_flow.flowfile.template import find_strings, parse_ref
from cyclone_flow.names import schedule_default_name
from cyclone_flow.text import did_you_mean, iter_unstorable, zone_info

if TYPE_CHECKING:  # imported where used: most commands never check a flow
    import networkx as nx

__all__ = ["check_document", "check_schedule_inputs", "dependency_graph"]

_DURATION_TEXT = re.compile(DURATION_PATTERN)


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
    import networkx as nx

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
    problems += _check_when(doc, nodes, graph)
    problems += _check_durations(doc, nodes)
    problems += _check_limits(doc, nodes, graph)
    problems += _check_schedules(doc)
    problems += _check_text(doc)
    return sorted(set(problems), key=lambda p: (p.line, p.col, p.code, p.message))


def _check_text(doc: Document) -> list[Problem]:
    """E008 for every string or mapping key of the document that Postgres cannot store:
    a NUL character (a ``"\\0"`` / ``"\\u0000"`` escape; jsonb cannot hold U+0000) or a
    lone surrogate (``"\\ud800"``; not UTF-8 text). Such a string could not be submitted,
    and a path or time zone holding it could not even be looked up."""
    out = []
    for path, is_key, reason in iter_unstorable(doc.data):
        label = ".".join(map(str, path)) or "the document"
        what = f"the key {shown(path[-1])}" if is_key else "the string"
        pos = doc.key_pos(path) if is_key else doc.value_pos(path)
        fix = (
            "remove the escape"
            if "NUL" in reason
            else "write the character itself, or a \\UXXXXXXXX escape for one above U+FFFF"
        )
        message = f"{label}: {what} contains {reason}, which cannot be stored: {fix}"
        out.append(doc.problem(pos, "E008", message))
    return out


def _check_needs(doc: Document, nodes: dict[str, dict[str, Any]]) -> list[Problem]:
    out = []
    for name, node in nodes.items():
        for index, need in _needs(node):
            pos = doc.value_pos(("nodes", name, "needs", index))
            if need == name:
                out.append(doc.problem(pos, "E012", f"node {name!r} needs itself"))
            elif need not in nodes:
                out.append(
                    doc.problem(
                        pos,
                        "E011",
                        f"node {name!r} needs {need!r}, which is not a node"
                        + did_you_mean(need, nodes),
                    )
                )
    return out


def _check_cycles(
    doc: Document, nodes: dict[str, dict[str, Any]], graph: nx.DiGraph
) -> list[Problem]:
    import networkx as nx

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


def _template_strings(
    nodes: dict[str, dict[str, Any]],
) -> Iterator[tuple[str, dict[str, Any], str, JsonPath, str]]:
    """Every string of every node's ``input`` and ``over``, in file order:
    ``(node name, node, key, path, text)``."""
    for name, node in nodes.items():
        for key in ("input", "over"):
            if key in node:
                for path, text in find_strings(node[key], ("nodes", name, key)):
                    yield name, node, key, path, text


def _check_refs(
    doc: Document, nodes: dict[str, dict[str, Any]], graph: nx.DiGraph
) -> list[Problem]:
    out: list[Problem] = []
    # (node, target) -> where the node refers to the target, for the ancestor check
    wanted: dict[str, dict[str, list[tuple[JsonPath, str]]]] = {}
    for name, node, key, path, text in _template_strings(nodes):
        try:
            ref = parse_ref(text)
        except TemplateError as exc:
            out.append(doc.problem(doc.value_pos(path), "E016", str(exc)))
            continue
        if ref is not None and ref.kind == "item":
            if key != "input" or node.get("type") != "fan_out":
                out.append(
                    doc.problem(
                        doc.value_pos(path),
                        "E017",
                        f"{text!r}: an item reference is only allowed in the input "
                        "of a fan_out node (each item step receives its list element)",
                    )
                )
            continue
        if ref is not None and ref.kind == "run" and ref.path:
            optional = _optional_input(doc, ref.path[0])
            if optional:
                out.append(doc.problem(doc.value_pos(path), "W001", f"{text!r} {optional}"))
        if ref is None or ref.node is None:
            continue
        if ref.node not in nodes:
            out.append(
                doc.problem(
                    doc.value_pos(path),
                    "E014",
                    f"{text!r} refers to node {ref.node!r}, which is not a node"
                    + did_you_mean(ref.node, nodes),
                )
            )
        else:
            wanted.setdefault(name, {}).setdefault(ref.node, []).append((path, text))
    for name, targets in _non_ancestors(graph, {n: set(t) for n, t in wanted.items()}).items():
        for target in targets:
            for path, text in wanted[name][target]:
                out.append(
                    doc.problem(
                        doc.value_pos(path),
                        "E013",
                        f"{text!r} in node {name!r} refers to node {target!r}, which is "
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


def _check_when(
    doc: Document, nodes: dict[str, dict[str, Any]], graph: nx.DiGraph
) -> list[Problem]:
    """E018 (syntax), E019 (a reference to a node that is not an ancestor), W003 (types),
    W002 (a template reading a skippable node's output from a node that may still run)."""
    out: list[Problem] = []
    wanted: dict[str, dict[str, list[tuple[int, str]]]] = {}
    for name, node in nodes.items():
        text = node.get("when")
        if not isinstance(text, str):
            continue
        path: JsonPath = ("nodes", name, "when")
        if not text.strip():  # one error, not the parser's "expected an expression"
            out.append(
                doc.problem(
                    doc.value_pos(path),
                    "E018",
                    f"node {name!r}: when: is empty (write a condition, or true / false)",
                )
            )
            continue
        try:
            condition = parse_condition(text)
        except ConditionSyntaxError as exc:
            pos = doc.inner_pos(path, exc.offset)
            out.append(doc.problem(pos, "E018", f"node {name!r}: when: {exc.message}"))
            continue
        for ref, offset in condition.references():
            if ref.node is None:
                continue
            if ref.node not in nodes:
                out.append(
                    doc.problem(
                        doc.inner_pos(path, offset),
                        "E019",
                        f"node {name!r}: when: refers to node {ref.node!r}, which is not a "
                        "node" + did_you_mean(ref.node, nodes),
                    )
                )
            else:
                wanted.setdefault(name, {}).setdefault(ref.node, []).append(
                    (offset, ref.expression)
                )
        out += _when_types(doc, name, condition)
    for name, targets in _non_ancestors(graph, {n: set(t) for n, t in wanted.items()}).items():
        for target in targets:
            for offset, expression in wanted[name][target]:
                out.append(
                    doc.problem(
                        doc.inner_pos(("nodes", name, "when"), offset),
                        "E019",
                        f"node {name!r}: when: {expression!r} refers to node {target!r}, which "
                        "is not an ancestor: a condition reads only the run input and the "
                        "outputs of nodes it needs (directly or through another node)",
                    )
                )
    out += _check_skippable_reads(doc, nodes, graph)
    return out


_SCHEMA_KINDS = {
    "integer": "number",
    "number": "number",
    "string": "string",
    "boolean": "boolean",
    "array": "list",
    "object": "mapping",
    "null": "null",
}


def _when_types(doc: Document, name: str, condition: Condition) -> list[Problem]:
    """W003 for the comparisons of ``condition`` with a literal whose type cannot match:
    an order comparison with a literal that is not a number or a string (it raises at run
    time unless the other side is null), or a ``run.input.KEY`` whose ``input_schema``
    type differs from the literal's."""
    data = doc.data if isinstance(doc.data, dict) else {}
    schema = data.get("input_schema")
    properties = schema.get("properties") if isinstance(schema, dict) else None
    out = []
    path: JsonPath = ("nodes", name, "when")
    for op, ref, kind, offset in literal_kinds(condition):
        pos = doc.inner_pos(path, offset)
        if op in ("<", "<=", ">", ">=") and kind not in ("number", "string"):
            out.append(
                doc.problem(
                    pos,
                    "W003",
                    f"node {name!r}: when: {op!r} compares {ref.expression!r} with a {kind}: "
                    "only numbers or strings can be ordered (this fails the node at run time)",
                )
            )
            continue
        if op in ("in", "not in") or ref.kind != "run" or len(ref.path) != 1:
            continue
        prop = properties.get(ref.path[0]) if isinstance(properties, dict) else None
        declared = prop.get("type") if isinstance(prop, dict) else None
        types = [declared] if isinstance(declared, str) else declared
        if not isinstance(types, list) or not types:
            continue
        kinds = {_SCHEMA_KINDS.get(t) for t in types if isinstance(t, str)}
        if None in kinds or kind in kinds:
            continue
        wanted = " or ".join(sorted(str(k) for k in kinds))
        never = "never true" if op != "!=" else "always true"
        out.append(
            doc.problem(
                pos,
                "W003",
                f"node {name!r}: when: compares {ref.expression!r} (a {wanted} in "
                f"input_schema) with a {kind}: {op!r} is {never}",
            )
        )
    return out


def _skippable(nodes: dict[str, dict[str, Any]], graph: nx.DiGraph, default_skip: Any) -> set[str]:
    """The nodes that can end ``skipped``: a ``when:`` other than ``true``, or a
    dependency that can be skipped without ``on_dep_skip: run`` (skip-cascade)."""
    import networkx as nx

    if not nx.is_directed_acyclic_graph(graph):
        return set()  # E010 reports the cycle
    out: set[str] = set()
    for name in nx.topological_sort(graph):
        node = nodes[name]
        when = node.get("when")
        conditional = when is not None and when is not True and when != "true"
        cascade = node.get("on_dep_skip", default_skip) != "run"
        if conditional or (cascade and any(p in out for p in graph.predecessors(name))):
            out.add(name)
    return out


def _check_skippable_reads(
    doc: Document, nodes: dict[str, dict[str, Any]], graph: nx.DiGraph
) -> list[Problem]:
    """W002: node N's ``input`` or ``over`` reads ``nodes.S.output`` where S can be skipped
    and N can still run when it is (no chain of ``on_dep_skip: skip`` dependents from S to
    N), and N does not say it expects that (``needs: [S]`` with ``on_dep_skip: run``)."""
    data = doc.data if isinstance(doc.data, dict) else {}
    defaults = data.get("defaults")
    default_skip = defaults.get("on_dep_skip", "skip") if isinstance(defaults, dict) else "skip"
    skippable = _skippable(nodes, graph, default_skip)
    if not skippable:
        return []

    def policy(name: str) -> Any:
        return nodes[name].get("on_dep_skip", default_skip)

    cascades: dict[str, set[str]] = {}
    out = []
    for name, node, _key, path, text in _template_strings(nodes):
        try:
            ref = parse_ref(text)
        except TemplateError:
            continue
        source = None if ref is None else ref.node
        if source not in skippable or source == name or source not in nodes:
            continue
        if source not in cascades:
            reached: set[str] = set()
            stack = [source]
            while stack:
                for child in graph.successors(stack.pop()):
                    if child not in reached and policy(child) != "run":
                        reached.add(child)
                        stack.append(child)
            cascades[source] = reached
        if name in cascades[source]:
            continue  # skipped whenever the source is
        direct = source in [n for _, n in _needs(node)]
        if direct and policy(name) == "run":
            continue  # asked for it: the output is null when the source is skipped
        out.append(
            doc.problem(
                doc.value_pos(path),
                "W002",
                f"node {name!r} reads {text!r}, but {source!r} can be skipped (a "
                f"when: on it or above it) while {name!r} still runs: the value is "
                f"then null. Add {source!r} to needs with on_dep_skip: run to accept "
                "null, or let the skip cascade to this node",
            )
        )
    return out


def _check_limits(
    doc: Document, nodes: dict[str, dict[str, Any]], graph: nx.DiGraph
) -> list[Problem]:
    """The ``key`` of each ``concurrency:`` / ``rate_limit:`` (in ``defaults`` and on the
    nodes): E016 when malformed; a reference to the run input (W001 as for inputs) or, on
    a node, to an ancestor's output (E014 for an unknown node, E013 for one that is not an
    ancestor); E026 for anything else (an ``item``, or a node output in ``defaults``);
    E007 for a ``per`` out of range."""
    out: list[Problem] = []
    data = doc.data if isinstance(doc.data, dict) else {}
    holders: list[tuple[JsonPath, Any]] = [(("defaults",), data.get("defaults"))]
    holders += [(("nodes", name), node) for name, node in nodes.items()]
    for where, holder in holders:
        if not isinstance(holder, dict):
            continue
        for what in ("concurrency", "rate_limit"):
            block = holder.get(what)
            if not isinstance(block, dict):
                continue
            if what == "rate_limit" and "per" in block:
                path = (*where, what, "per")
                problem = _too_long(doc, path, block["per"]) or _too_short(
                    doc, path, block["per"], zero_ok=False
                )
                if problem is not None:
                    out.append(problem)
            key = block.get("key")
            if not isinstance(key, str):
                continue
            path = (*where, what, "key")
            try:
                ref = parse_ref(key)
            except TemplateError as exc:
                out.append(doc.problem(doc.value_pos(path), "E016", str(exc)))
                continue
            if ref is None:
                continue
            node = where[1] if where[0] == "nodes" else None
            if ref.kind == "run":
                if ref.path and (optional := _optional_input(doc, ref.path[0])):
                    out.append(doc.problem(doc.value_pos(path), "W001", f"{key!r} {optional}"))
            elif ref.kind == "nodes" and node is not None and ref.node is not None:
                if ref.node not in nodes:
                    message = f"{key!r} refers to node {ref.node!r}, which is not a node"
                    message += did_you_mean(ref.node, nodes)
                    out.append(doc.problem(doc.value_pos(path), "E014", message))
                elif _non_ancestors(graph, {str(node): {ref.node}}).get(str(node)):
                    out.append(
                        doc.problem(
                            doc.value_pos(path),
                            "E013",
                            f"{key!r} in node {node!r} refers to node {ref.node!r}, which is "
                            "not an ancestor: add it to needs (directly or through another node)",
                        )
                    )
            else:
                where_text = "in defaults " if node is None else ""
                out.append(
                    doc.problem(
                        doc.value_pos(path),
                        "E026",
                        f"{what}.key {key!r} {where_text}refers to {ref.expression!r}: a limit "
                        "key may refer to the run input (${{ run.input... }}) or, on a node, "
                        "to an ancestor's output (${{ nodes.NAME.output... }})",
                    )
                )
    return out


def _optional_input(doc: Document, key: str) -> str | None:
    """Why ``run.input.KEY`` may be missing from a run input (W001), or None: when the
    flow's ``input_schema`` is an object schema (``properties`` or ``required`` at its
    top) that neither requires ``key`` nor gives it a top-level ``default`` (which submit
    fills in). No ``input_schema``, or one of another shape: None (nothing to compare)."""
    data = doc.data if isinstance(doc.data, dict) else {}
    schema = data.get("input_schema")
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties")
    required = schema.get("required")
    if not isinstance(properties, dict) and not isinstance(required, list):
        return None
    if isinstance(required, list) and key in required:
        return None
    prop = properties.get(key) if isinstance(properties, dict) else None
    if isinstance(prop, dict) and "default" in prop:
        return None
    return (
        f"refers to input {key!r}, which input_schema neither requires nor gives a default: "
        "a run submitted without it fails this step (add it to required, or give it a "
        "default)"
    )


def _non_ancestors(graph: nx.DiGraph, wanted: dict[str, set[str]]) -> dict[str, set[str]]:
    """For each node ``name`` in ``wanted``: the names in ``wanted[name]`` that are not
    ancestors of it (not reachable through ``needs``; a node is never its own ancestor).

    Near-linear, unlike one ``nx.ancestors`` per node (quadratic on long chains): the
    ancestors of each strongly connected component are a bitset (a Python int, one bit
    per component) built in topological order, each dropped after its last successor.
    """
    if not wanted:
        return {}
    import networkx as nx

    cond = nx.condensation(graph)
    component: dict[str, int] = cond.graph["mapping"]
    members: dict[int, set[str]] = nx.get_node_attributes(cond, "members")
    remaining = {c: cond.out_degree(c) for c in cond}
    above: dict[int, int] = {}
    out: dict[str, set[str]] = {}
    for c in nx.topological_sort(cond):
        bits = 0
        for p in cond.predecessors(c):
            bits |= above[p] | (1 << p)
            remaining[p] -= 1
            if remaining[p] == 0:
                del above[p]
        if remaining[c]:
            above[c] = bits
        cyclic = len(members[c]) > 1
        for name in members[c] & wanted.keys():
            out[name] = {
                t
                for t in wanted[name]
                if t == name or not ((bits >> component[t]) & 1 or (cyclic and component[t] == c))
            }
    return out


def _duration(value: Any) -> float | None:
    try:
        return parse_duration(value)
    except ValueError:
        return None  # the schema reports it (or _too_long does)


def _too_long(doc: Document, path: JsonPath, value: Any) -> Problem | None:
    """E007 when ``value`` is a well-formed duration string longer than 366 days.

    The schema's ``maximum`` bounds numbers; its ``pattern`` cannot bound strings.
    """
    if not isinstance(value, str) or not _DURATION_TEXT.fullmatch(value):
        return None
    try:
        parse_duration(value, max_s=MAX_FLOW_DURATION_S)
    except ValueError:
        limit = format_duration(MAX_FLOW_DURATION_S)
        return doc.problem(
            doc.value_pos(path),
            "E007",
            f"{'.'.join(map(str, path))}: {value!r} is longer than the maximum of {limit}",
        )
    return None


def _too_short(doc: Document, path: JsonPath, value: Any, *, zero_ok: bool) -> Problem | None:
    """E007 when the duration ``value`` (a string or a number) is above 0 but below 1ms
    (or is 0 where ``zero_ok`` is False, for a string: the schema bounds numbers)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    seconds = _duration(value)
    if seconds is None or seconds >= MIN_FLOW_DURATION_S:
        return None
    label = ".".join(map(str, path))
    if seconds == 0:
        if zero_ok or not isinstance(value, str):
            return None
        return doc.problem(doc.value_pos(path), "E007", f"{label}: must be longer than 0s")
    minimum = format_duration(MIN_FLOW_DURATION_S)
    allowed = "0 (no wait) or at least" if zero_ok else "at least"
    return doc.problem(
        doc.value_pos(path),
        "E007",
        f"{label}: {value!r} is shorter than 1ms: must be {allowed} {minimum}",
    )


def _check_durations(doc: Document, nodes: dict[str, dict[str, Any]]) -> list[Problem]:
    out: list[Problem] = []
    data = doc.data if isinstance(doc.data, dict) else {}
    holders: list[tuple[JsonPath, Any]] = [(("defaults",), data.get("defaults"))]
    holders += [(("nodes", name), node) for name, node in nodes.items()]
    holders.append(((), {k: data[k] for k in ("deadline", "import_wait") if k in data}))
    for where, holder in holders:
        if not isinstance(holder, dict):
            continue
        for key in ("timeout", "max_wait", "deadline", "import_wait"):
            if key in holder:
                if (too_long := _too_long(doc, (*where, key), holder[key])) is not None:
                    out.append(too_long)
                    continue
                short = _too_short(doc, (*where, key), holder[key], zero_ok=False)
                if short is not None:
                    out.append(short)
        retry = holder.get("retry")
        backoff = retry.get("backoff") if isinstance(retry, dict) else None
        if not isinstance(backoff, dict):
            continue
        bounded = True
        for key in ("initial", "max"):
            if key in backoff:
                path = (*where, "retry", "backoff", key)
                if (too_long := _too_long(doc, path, backoff[key])) is not None:
                    out.append(too_long)
                    bounded = False
                elif (short := _too_short(doc, path, backoff[key], zero_ok=True)) is not None:
                    out.append(short)
                    bounded = False
        if bounded and "initial" in backoff and "max" in backoff:
            initial, most = _duration(backoff["initial"]), _duration(backoff["max"])
            if (
                initial is not None
                and most is not None
                and most < initial <= MAX_FLOW_DURATION_S  # above: the schema's maximum
            ):
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


def _check_schedules(doc: Document) -> list[Problem]:
    """E050 a cron expression cyclone-flow does not accept (:func:`cron_problem`, as the
    API checks it) or one that never fires, E051 an unknown IANA time zone, E052 a
    schedule name used twice (given, or defaulted as ``schedule sync`` does)."""
    data = doc.data if isinstance(doc.data, dict) else {}
    schedules = data.get("schedules")
    if not isinstance(schedules, list):
        return []
    flow_name = data.get("name")
    flow = flow_name if isinstance(flow_name, str) else "flow"
    out: list[Problem] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(schedules):
        if not isinstance(entry, dict):
            continue
        cron = entry.get("cron")
        problem = cron_problem(cron) if isinstance(cron, str) and cron else None
        if problem is not None:
            out.append(
                doc.problem(
                    doc.value_pos(("schedules", i, "cron")),
                    "E050",
                    f"schedules.{i}.cron: {shown(cron)} is not a cron expression: {problem} "
                    "(5 fields 'minute hour day month weekday', a 6th for seconds, or "
                    "@hourly, @daily, @weekly, @monthly, @yearly)",
                )
            )
        elif isinstance(cron, str) and cron and _never_fires(cron):
            out.append(
                doc.problem(
                    doc.value_pos(("schedules", i, "cron")),
                    "E050",
                    f"schedules.{i}.cron: {cron!r} never fires (no date matches its day "
                    "and month fields, e.g. '0 0 31 2 *')",
                )
            )
        zone = entry.get("timezone")
        if isinstance(zone, str) and zone and zone_info(zone) is None:
            out.append(
                doc.problem(
                    doc.value_pos(("schedules", i, "timezone")),
                    "E051",
                    f"schedules.{i}.timezone: {shown(zone)} is not an IANA time zone "
                    "(e.g. UTC, Europe/Paris)",
                )
            )
        name = entry.get("name")
        if not isinstance(name, str):
            name = _default_schedule_name(flow, entry)
            if name is None:
                continue  # an input JSON cannot hold: reported by E003/E004
        if name in seen:
            where: JsonPath = ("schedules", i, "name") if "name" in entry else ("schedules", i)
            pos = doc.value_pos(where) if "name" in entry else doc.key_pos(where)
            same = "" if "name" in entry else " (the same cron, timezone and input)"
            out.append(
                doc.problem(
                    pos,
                    "E052",
                    f"schedules.{i}: the name {name!r} is already used by "
                    f"schedules.{seen[name]}{same}",
                )
            )
        else:
            seen[name] = i
    return out


def check_schedule_inputs(doc: Document) -> list[Problem]:
    """E053: a schedule's ``input`` (the run input of its ticks, top-level ``default``
    values filled in as at submit) that the flow's own ``input_schema`` refuses: every
    tick would fail. Call on a document without errors (a valid schema)."""
    data = doc.data if isinstance(doc.data, dict) else {}
    schedules = data.get("schedules")
    schema = data.get("input_schema")
    if not isinstance(schedules, list) or not isinstance(schema, dict):
        return []
    name = data.get("name")
    validator = InputValidator(name if isinstance(name, str) else "flow", schema)
    out: list[Problem] = []
    for i, entry in enumerate(schedules):
        if not isinstance(entry, dict):
            continue
        try:
            validator(entry.get("input"))
        except InputValidationError as exc:
            where: JsonPath = ("schedules", i, "input") if "input" in entry else ("schedules", i)
            pos = doc.value_pos(where) if "input" in entry else doc.key_pos(where)
            at = f" at {exc.path}" if exc.path else ""
            out.append(
                doc.problem(
                    pos,
                    "E053",
                    f"schedules.{i}.input{at}: the flow's input_schema refuses it: "
                    f"{exc.reason}; every tick of this schedule would fail",
                )
            )
    return out


def _default_schedule_name(flow: str, entry: dict[str, Any]) -> str | None:
    """The name ``schedule sync`` gives ``entry`` (it has no ``name``), None when its
    values cannot be digested (E003 reports a wrong type)."""
    cron, zone = entry.get("cron"), entry.get("timezone", "UTC")
    if not isinstance(cron, str) or not isinstance(zone, str):
        return None
    try:
        return schedule_default_name(flow, cron, zone, entry.get("input"))
    except (TypeError, ValueError, RecursionError):  # e.g. mixed key types in input
        return None


def _never_fires(cron: str) -> bool:
    """True when no date matches ``cron`` (``0 0 31 2 *``): croniter finds no next tick.
    Leap days (``0 0 29 2 *``) do fire."""
    try:
        croniter(cron, datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        return True
    return False

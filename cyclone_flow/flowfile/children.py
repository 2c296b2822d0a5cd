"""Child flows: where a ``type: child`` node's ``flow:`` file is, and the lint checks of the
flow-reference graph (networkx: one edge per child node, file -> child file).

Codes: E030 (the child flow file does not exist or cannot be read), E031 (flows include
each other recursively: the message prints the loop of files), E032 (the child flow file
has problems of its own: the count and the first one).

A ``flow:`` path is relative to the folder of the file that names it; for a flow given as
text without a file (``<string>``), relative to the current folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cyclone_flow.errors import Problem
from cyclone_flow.flowfile.read import Document, parse_yaml, read_text
from cyclone_flow.text import describe_unstorable

if TYPE_CHECKING:  # imported where used: most commands never check a flow
    import networkx as nx

__all__ = ["check_children", "child_path", "child_refs", "reference_graph"]


MAX_FLOW_PATH_CHARS = 4096
"""The longest ``flow:`` path (PATH_MAX on Linux; also ``maxLength`` in the schema)."""


def child_refs(data: Any) -> list[tuple[str, str]]:
    """``(node name, flow path as written)`` of every ``type: child`` node of the flow
    document ``data`` that names a ``flow`` string, in file order. Shape errors are
    skipped, and so are paths no file system could open (longer than
    :data:`MAX_FLOW_PATH_CHARS`, or holding a NUL or a lone surrogate: E003 and E008
    report those)."""
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, dict):
        return []
    return [
        (name, node["flow"])
        for name, node in nodes.items()
        if isinstance(node, dict)
        and node.get("type") == "child"
        and isinstance(node.get("flow"), str)
        and node["flow"]
        and len(node["flow"]) <= MAX_FLOW_PATH_CHARS
        and describe_unstorable(node["flow"]) is None
    ]


def child_path(parent_path: str, ref: str) -> str:
    """The path of child flow ``ref`` named in the file ``parent_path``."""
    if parent_path.startswith("<") and parent_path.endswith(">"):
        base = os.getcwd()
    else:
        base = os.path.dirname(parent_path) or os.getcwd()
    return os.path.normpath(os.path.join(base, ref))


def _key(path: str) -> str:
    return os.path.realpath(path)


def reference_graph(path: str, data: Any) -> nx.DiGraph:
    """The flow-reference graph reachable from the flow ``data`` read from ``path``:
    nodes are real paths of flow files, an edge ``a -> b`` means a child node of ``a``
    names ``b``. Files that cannot be read or parsed are leaves."""
    import networkx as nx

    graph = nx.DiGraph()
    root = _key(path)
    graph.add_node(root)
    todo: list[tuple[str, str, Any]] = [(path, root, data)]
    seen = {root}
    while todo:
        file, key, content = todo.pop()
        for _, ref in child_refs(content):
            target = child_path(file, ref)
            tkey = _key(target)
            graph.add_edge(key, tkey)
            if tkey in seen:
                continue
            seen.add(tkey)
            text, _ = read_text(target) if os.path.isfile(target) else (None, None)
            if text is None:
                continue
            doc, _ = parse_yaml(text, target)
            if doc is not None:
                todo.append((target, tkey, doc.data))
    return graph


def _show(key: str) -> str:
    try:
        rel = os.path.relpath(key)
    except ValueError:
        return key
    return key if rel.startswith(".." + os.sep + "..") else rel


def _loop(graph: nx.DiGraph, root: str, child: str) -> list[str] | None:
    """The loop of files that including ``child`` from ``root`` runs into, if any."""
    import networkx as nx

    if nx.has_path(graph, child, root):
        return [root, *nx.shortest_path(graph, child, root)]
    try:
        edges = nx.find_cycle(graph, source=child)
    except nx.NetworkXNoCycle:
        return None
    loop = [u for u, _ in edges]
    return [*loop, loop[0]]


def check_children(doc: Document, analyse: Callable[[str, str], list[Problem]]) -> list[Problem]:
    """Lint the child nodes of ``doc``: E030 missing or unreadable file, E031 recursion,
    E032 a child flow with problems (``analyse(text, path)`` lints it: the pipeline's
    :func:`cyclone_flow.flowfile.load.lint_text`, passed in by it)."""
    refs = child_refs(doc.data)
    if not refs:
        return []
    graph = reference_graph(doc.path, doc.data)
    root = _key(doc.path)
    out: list[Problem] = []
    for name, ref in refs:
        pos = doc.value_pos(("nodes", name, "flow"))
        target = child_path(doc.path, ref)
        if not os.path.isfile(target):
            out.append(
                doc.problem(
                    pos, "E030", f"node {name!r}: child flow file {ref!r} not found ({target})"
                )
            )
            continue
        loop = _loop(graph, root, _key(target))
        if loop is not None:
            chain = " -> ".join(_show(k) for k in loop)
            out.append(
                doc.problem(
                    pos,
                    "E031",
                    f"node {name!r}: child flows include each other recursively: {chain}",
                )
            )
            continue
        text, problem = read_text(target)
        if text is None:
            why = problem.message if problem else "unreadable"
            out.append(
                doc.problem(pos, "E030", f"node {name!r}: cannot read child flow {ref!r}: {why}")
            )
            continue
        found = [p for p in analyse(text, target) if p.severity == "error"]
        if found:
            out.append(
                doc.problem(
                    pos,
                    "E032",
                    f"node {name!r}: child flow {ref!r} has {len(found)} problem(s), the "
                    f"first: {found[0]}",
                )
            )
    return out

"""The DAG picture of the dashboard (:mod:`cyclone_flow.ui.dag`): every node drawn, in
columns by depth, escaped, and fast on a 2,000-node flow."""

from __future__ import annotations

import re
import time

import pytest

pytest.importorskip("markupsafe", reason="the ui extra is not installed")

from cyclone_flow.ui.dag import GAP_X, NODE_W, dag_nodes, render_svg


def _definition(width: int, depth: int) -> dict[str, object]:
    nodes: dict[str, object] = {}
    for level in range(depth):
        for i in range(width):
            needs = [f"n{level - 1}_{j}" for j in (i, (i + 1) % width)] if level else []
            nodes[f"n{level}_{i}"] = {"call": "m:f", "needs": needs}
    return {"name": "big", "nodes": nodes}


def test_a_flow_without_a_run_draws_every_node_in_columns_by_depth() -> None:
    definition = {
        "name": "x",
        "nodes": {
            "a": {"call": "pkg.mod:load"},
            "b": {"call": "m:f", "needs": ["a"]},
            "c": {"type": "wait_signal", "signal": "go", "needs": ["a"]},
            "d": {"type": "fan_out", "over": [1], "call": "m:f", "needs": ["b", "c"]},
        },
    }
    nodes = dag_nodes(definition)
    assert [(n.name, n.state) for n in nodes] == [(k, "none") for k in "abcd"]
    svg = str(render_svg(nodes, lambda n: f"/x/{n.name}"))
    xs = {name: int(x) for name, x in re.findall(r'data-node="(\w)".*?<rect x="(\d+)"', svg)}
    assert xs["a"] < xs["b"] == xs["c"] < xs["d"]
    assert xs["b"] - xs["a"] == NODE_W + GAP_X
    assert svg.count('class="edge"') == 4
    assert 'href="/x/d"' in svg and ">load<" in svg and ">signal go<" in svg


def test_a_root_needed_late_stands_next_to_its_dependent() -> None:
    # the weather flow's shape: prepare_table is needed only by store, two columns on
    definition = {
        "name": "w",
        "nodes": {
            "load": {"call": "m:f"},
            "monthly": {"call": "m:f", "needs": ["load"]},
            "prepare": {"call": "m:f"},
            "store": {"call": "m:f", "needs": ["monthly", "prepare"]},
        },
    }
    svg = str(render_svg(dag_nodes(definition), lambda n: None))
    at = {
        name: (int(x), int(y))
        for name, x, y in re.findall(r'data-node="(\w+)".*?<rect x="(\d+)" y="(\d+)"', svg)
    }
    assert at["prepare"][0] == at["monthly"][0]  # not under monthly's box in column 0
    assert at["monthly"][1] < at["prepare"][1]  # the node with needs keeps the first row


def test_texts_are_escaped() -> None:
    definition = {"name": "x", "nodes": {"a": {"call": 'm:"><img src=x onerror=alert(1)>'}}}
    svg = str(render_svg(dag_nodes(definition), lambda n: None))
    assert "<img" not in svg and "&lt;img" in svg


def test_two_thousand_nodes_render_at_once() -> None:
    definition = _definition(width=100, depth=20)
    start = time.perf_counter()
    svg = str(render_svg(dag_nodes(definition), lambda n: f"/s/{n.name}"))
    took = time.perf_counter() - start
    assert svg.count('<g class="node') == 2000
    assert svg.count('class="edge"') == 100 * 19 * 2
    assert took < 2.0, f"{took:.2f} s for 2,000 nodes"

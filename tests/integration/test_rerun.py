"""Rerun from a node, reusing finished work: which handlers are called again
(counted), what flows from the reused nodes, fan-out and child nodes above and below the
rerun point, the refused cases (nothing written), and exactly-once effects through
``ctx.completion_tx()`` for the new run only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cyclone_test_handlers import conditions
from helpers.rows import create_ledger, ledger_rows, step_row, step_rows

from cyclone_flow import Client, InputValidationError, RerunRefusedError, RunStateError, load_flow
from cyclone_flow.flowfile import load_flow_text

H = "cyclone_test_handlers.conditions"

DIAMOND = f"""
name: rerun-diamond
input_schema:
  type: object
  properties:
    x: {{type: integer}}
    y: {{type: integer, default: 0}}
    schema: {{type: string}}
nodes:
  a:
    call: {H}:value
    input: {{x: "${{{{ run.input.x }}}}"}}
  b:
    call: {H}:echo
    needs: [a]
    input: {{from_a: "${{{{ nodes.a.output.x }}}}"}}
  c:
    call: {H}:echo
    needs: [a]
    input: {{from_a: "${{{{ nodes.a.output.x }}}}", y: "${{{{ run.input.y }}}}"}}
  d:
    call: {H}:ledger
    needs: [b, c]
    input: {{schema: "${{{{ run.input.schema }}}}", b: "${{{{ nodes.b.output }}}}"}}
"""


def _run(client: Client, flow: Any, run_input: Any) -> str:
    run_id = client.submit(flow, run_input)
    status = client.wait(run_id, timeout=15)
    assert status.state == "completed", client.list_steps(run_id)
    return run_id


def _calls(run_id: str, nodes: str) -> dict[str, int]:
    return {n: conditions.calls(run_id, n) for n in nodes}


def test_rerun_from_the_middle_of_a_diamond_reuses_upstream_and_reruns_downstream(
    make_client: Callable[..., Client], db: Any, schema: str
) -> None:
    create_ledger(db)
    client = make_client(workers=2)
    client.start()
    flow = load_flow_text(DIAMOND)
    original = _run(client, flow, {"x": 1, "schema": schema})
    before = step_rows(db, original)
    new_id = client.rerun(original, "b")
    status = client.wait(new_id, timeout=15)
    assert status.state == "completed", client.list_steps(new_id)
    assert _calls(new_id, "abcd") == {"a": 0, "b": 1, "c": 0, "d": 1}
    assert _calls(original, "abcd") == {"a": 1, "b": 1, "c": 1, "d": 1}
    # outputs flow from the reused nodes
    assert conditions.inputs(new_id, "b") == [{"from_a": 1}]
    assert conditions.inputs(new_id, "d")[0]["b"] == {"node": "b", "input": {"from_a": 1}}
    rows = step_rows(db, new_id)
    assert {n: r["reused_from"] for n, r in rows.items()} == {
        "a": before["a"]["id"],
        "b": None,
        "c": before["c"]["id"],
        "d": None,
    }
    assert rows["c"]["output"] == before["c"]["output"]
    assert (rows["a"]["state"], rows["a"]["lease_generation"]) == ("completed", 0)
    assert client.get_run(new_id).rerun_of == original
    assert client.get_run(original).rerun_of is None
    assert status.output == {"d": {"node": "d"}}
    # the completion_tx write of d: once for each run, the original's untouched
    assert [r[1] for r in ledger_rows(db, original)] == ["d"]
    assert [r[1] for r in ledger_rows(db, new_id)] == ["d"]
    steps = {s.node: s for s in client.list_steps(new_id)}
    assert steps["a"].reused_from == before["a"]["id"] and steps["b"].reused_from is None


def test_rerun_from_several_nodes_and_of_a_rerun(
    make_client: Callable[..., Client], db: Any, schema: str
) -> None:
    create_ledger(db)
    client = make_client(workers=2)
    client.start()
    original = _run(client, load_flow_text(DIAMOND), {"x": 1, "schema": schema})
    first = client.rerun(original, ["c", "b"])
    assert client.wait(first, timeout=15).state == "completed"
    assert _calls(first, "abcd") == {"a": 0, "b": 1, "c": 1, "d": 1}
    second = client.rerun(first, "d")
    assert client.wait(second, timeout=15).state == "completed"
    assert _calls(second, "abcd") == {"a": 0, "b": 0, "c": 0, "d": 1}
    assert client.get_run(second).rerun_of == first
    assert step_row(db, second, "b")["reused_from"] == step_row(db, first, "b")["id"]


def test_a_changed_input_that_changes_an_upstream_input_is_refused_unless_forced(
    make_client: Callable[..., Client], db: Any, schema: str
) -> None:
    create_ledger(db)
    client = make_client(workers=2)
    client.start()
    original = _run(client, load_flow_text(DIAMOND), {"x": 1, "schema": schema})
    runs_before = db.execute("SELECT count(*) FROM cyclone_runs").fetchone()[0]
    with pytest.raises(RerunRefusedError) as info:
        client.rerun(original, "d", input_patch={"x": 2})
    assert info.value.nodes == ("a",)
    assert "'a'" in str(info.value) and "--force" in str(info.value)
    with pytest.raises(RerunRefusedError) as info:
        client.rerun(original, "d", input_patch={"y": 5})
    assert info.value.nodes == ("c",)
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone()[0] == runs_before
    # the same input again is no change
    same = client.rerun(original, "b", {"x": 1, "schema": schema, "y": 0})
    assert client.wait(same, timeout=15).state == "completed"
    forced = client.rerun(original, "d", input_patch={"x": 2}, force=True)
    assert client.wait(forced, timeout=15).state == "completed"
    assert _calls(forced, "abcd") == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert client.get_run(forced).input == {"x": 2, "y": 0, "schema": schema}
    assert conditions.inputs(forced, "b") == [{"from_a": 2}]
    with pytest.raises(InputValidationError):
        client.rerun(original, "a", input_patch={"x": "not a number"})


def test_refused_when_an_upstream_node_did_not_complete_and_failed_reruns_from_it(
    make_client: Callable[..., Client], db: Any
) -> None:
    flow = load_flow_text(
        """
name: rerun-failed
nodes:
  a:
    call: cyclone_test_handlers.node_types:fail_on
    input: {value: 1, bad: "${{ run.input.bad }}"}
  b:
    call: cyclone_test_handlers.conditions:echo
    needs: [a]
"""
    )
    client = make_client(workers=1)
    client.start()
    original = client.submit(flow, {"bad": 1})
    assert client.wait(original, timeout=15).state == "failed"
    with pytest.raises(RerunRefusedError) as info:
        client.rerun(original, "b")
    assert info.value.nodes == ("a",)
    assert "did not complete (it is discarded)" in str(info.value)
    with pytest.raises(RunStateError, match="no node 'ghost'"):
        client.rerun(original, "ghost")
    with pytest.raises(RunStateError, match="no node to rerun from"):
        client.rerun(original)
    # --failed: from a (discarded) and b (cancelled), with an input that lets a pass
    new_id = client.rerun(original, failed=True, input_patch={"bad": 2})
    status = client.wait(new_id, timeout=15)
    assert status.state == "completed", client.list_steps(new_id)
    assert conditions.calls(new_id, "b") == 1
    with pytest.raises(RunStateError, match="no node was discarded or cancelled"):
        client.rerun(new_id, failed=True)


def test_rerun_of_a_running_run_is_refused(make_client: Callable[..., Client], db: Any) -> None:
    flow = load_flow_text(
        "name: waits\nnodes:\n  w: {type: wait_signal, signal: go}\n"
        f"  after: {{call: {H}:value, needs: [w]}}\n"
    )
    client = make_client()
    run_id = client.submit(flow, {})
    with pytest.raises(RunStateError, match="only a finished run can be rerun"):
        client.rerun(run_id, "after")
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone()[0] == 1


FAN = f"""
name: rerun-fan
nodes:
  spread:
    type: fan_out
    call: {H}:value
    over: "${{{{ run.input.items }}}}"
  total:
    call: {H}:echo
    needs: [spread]
    input: {{values: "${{{{ nodes.spread.output }}}}"}}
"""


def test_a_fan_out_upstream_keeps_its_items_outputs(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client(workers=2)
    client.start()
    original = _run(client, load_flow_text(FAN), {"items": [3, 4, 5]})
    new_id = client.rerun(original, "total")
    assert client.wait(new_id, timeout=15).state == "completed"
    assert [conditions.calls(new_id, f"spread[{i}]") for i in range(3)] == [0, 0, 0]
    assert conditions.inputs(new_id, "total") == [{"values": [3, 4, 5]}]
    items = db.execute(
        "SELECT item_index, state, output, reused_from IS NOT NULL FROM cyclone_steps"
        " WHERE run_id = %s AND parent_node = 'spread' ORDER BY item_index",
        (new_id,),
    ).fetchall()
    assert items == [
        (0, "completed", 3, True),
        (1, "completed", 4, True),
        (2, "completed", 5, True),
    ]
    spread = step_row(db, new_id, "spread")
    assert (spread["items_total"], spread["items_done"]) == (3, 3)
    # from the fan-out node itself: new items, the handlers run again
    again = client.rerun(original, "spread")
    assert client.wait(again, timeout=15).state == "completed"
    assert [conditions.calls(again, f"spread[{i}]") for i in range(3)] == [1, 1, 1]


CHILD = f"name: rerun-child\nnodes:\n  c: {{call: {H}:value}}\n"
PARENT = f"""
name: rerun-parent
nodes:
  prepare:
    call: {H}:value
  sub:
    type: child
    flow: child.yaml
    needs: [prepare]
    input: {{v: "${{{{ nodes.prepare.output.v }}}}"}}
  after:
    call: {H}:echo
    needs: [sub]
    input: {{got: "${{{{ nodes.sub.output }}}}"}}
"""


def test_a_child_node_upstream_keeps_its_child_run_and_one_below_starts_a_new_one(
    make_client: Callable[..., Client], db: Any, tmp_path: Path
) -> None:
    (tmp_path / "child.yaml").write_text(CHILD)
    (tmp_path / "parent.yaml").write_text(PARENT)
    client = make_client(workers=2)
    client.start()
    original = _run(client, load_flow(tmp_path / "parent.yaml"), {"v": 7})
    child = step_row(db, original, "sub")["child_run_id"]

    def children(run_id: str) -> list[str]:
        rows = db.execute(
            "SELECT id::text FROM cyclone_runs WHERE parent_run_id = %s", (run_id,)
        ).fetchall()
        return [r[0] for r in rows]

    upstream = client.rerun(original, "after")
    assert client.wait(upstream, timeout=15).state == "completed"
    assert children(upstream) == []  # no new child run
    assert str(step_row(db, upstream, "sub")["child_run_id"]) == str(child)
    assert conditions.inputs(upstream, "after") == [{"got": {"c": {"v": 7}}}]
    below = client.rerun(original, "sub")
    assert client.wait(below, timeout=15).state == "completed"
    (new_child,) = children(below)
    assert new_child != str(child) and conditions.calls(new_child, "c") == 1
    assert conditions.calls(below, "prepare") == 0
    with pytest.raises(RunStateError, match="child run of run"):
        client.rerun(str(child), "c")


def test_a_reused_skipped_node_stays_skipped_and_its_cascade_holds(
    make_client: Callable[..., Client], db: Any
) -> None:
    flow = load_flow_text(
        f"""
name: rerun-skips
nodes:
  a: {{call: {H}:value}}
  gate: {{call: {H}:value, needs: [a], when: "run.input.go"}}
  below: {{call: {H}:value, needs: [gate]}}
  side: {{call: {H}:value, needs: [a]}}
"""
    )
    client = make_client(workers=2)
    client.start()
    original = _run(client, flow, {"go": False})
    new_id = client.rerun(original, ["below", "side"])
    assert client.wait(new_id, timeout=15).state == "completed"
    rows = step_rows(db, new_id)
    assert {n: r["state"] for n, r in rows.items()} == {
        "a": "completed",
        "gate": "skipped",
        "below": "skipped",
        "side": "completed",
    }
    assert rows["gate"]["reused_from"] is not None and rows["below"]["reused_from"] is None
    assert conditions.calls(new_id, "side") == 1 and conditions.calls(new_id, "below") == 0

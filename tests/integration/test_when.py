"""Conditional nodes: ``when:`` decided in the transaction that would release
the node, the terminal state ``skipped`` with its recorded condition, skip-cascade and
``on_dep_skip: run``, skipped fan-out / child / wait_signal / root nodes and leaves, and
one decision when two parents complete at once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cyclone_test_handlers import conditions, engine
from helpers.procs import wait_until
from helpers.rows import create_ledger, ledger_rows, step_row, step_rows

from cyclone_flow import Client, StepEvent, load_flow
from cyclone_flow.flowfile import load_flow_text

H = "cyclone_test_handlers.conditions"

BRANCHES = f"""
name: branches
nodes:
  check:
    call: {H}:value
    input: {{ok: "${{{{ run.input.ok }}}}", v: 7}}
  ship:
    call: {H}:echo
    needs: [check]
    when: nodes.check.output.ok == true
  label:
    call: {H}:echo
    needs: [ship]
  notify:
    call: {H}:value
    needs: [ship]
    on_dep_skip: run
    input: {{shipped: "${{{{ nodes.ship.output.node }}}}", whole: "${{{{ nodes.ship.output }}}}"}}
  peek:
    call: {H}:upstream
    needs: [notify]
    on_dep_skip: run
    input: {{names: [ship, check]}}
"""


def _states(db: Any, run_id: str) -> dict[str, str]:
    return {node: row["state"] for node, row in step_rows(db, run_id).items()}


def test_when_true_runs_the_node_and_its_dependents(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(load_flow_text(BRANCHES), {"ok": True})
    status = client.wait(run_id, timeout=15)
    assert status.state == "completed", client.list_steps(run_id)
    assert set(_states(db, run_id).values()) == {"completed"}
    assert conditions.calls(run_id, "ship") == 1
    assert conditions.inputs(run_id, "notify") == [
        {"shipped": "ship", "whole": {"node": "ship", "input": {"ok": True}}}
    ]
    assert step_row(db, run_id, "ship")["skip_reason"] is None


def test_when_false_skips_the_node_cascades_and_runs_on_dep_skip_run_with_null(
    make_client: Callable[..., Client], db: Any
) -> None:
    events: list[StepEvent] = []
    client = make_client(workers=2, on_step_event=events.append)
    client.start()
    run_id = client.submit(load_flow_text(BRANCHES), {"ok": False})
    status = client.wait(run_id, timeout=15)
    assert status.state == "completed", client.list_steps(run_id)
    assert _states(db, run_id) == {
        "check": "completed",
        "ship": "skipped",
        "label": "skipped",
        "notify": "completed",
        "peek": "completed",
    }
    assert conditions.calls(run_id, "ship") == 0
    assert conditions.calls(run_id, "label") == 0
    # every reference into the skipped node's output is null, whatever its path
    assert conditions.inputs(run_id, "notify") == [{"shipped": None, "whole": None}]
    # ctx.upstream of a skipped node is null too
    peek = client.get_run(run_id).output["peek"]
    assert peek == {"ship": None, "check": {"ok": False, "v": 7}}
    ship = step_row(db, run_id, "ship")
    assert ship["skip_reason"] == {
        "when": "nodes.check.output.ok == true",
        "values": {"nodes.check.output.ok": False},
    }
    assert ship["finished_at"] is not None and ship["lease_generation"] == 0
    assert step_row(db, run_id, "label")["skip_reason"] == {"upstream": "ship"}
    # the skipped leaf (label) is left out of the output; notify is not a leaf
    assert set(status.output) == {"peek"}
    wait_until(lambda: len([e for e in events if e.kind == "skipped"]) >= 2, what="events")
    skipped = sorted(e.node for e in events if e.kind == "skipped")
    assert skipped == ["label", "ship"]
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert steps["ship"].state == "skipped"
    assert steps["ship"].skip_reason == ship["skip_reason"]


REFS = f"""
name: refs
nodes:
  a:
    call: {H}:value
  missing_is_null:
    call: {H}:echo
    needs: [a]
    when: "nodes.a.output.nothing.deeper == null and run.input.absent == null"
  order_with_null:
    call: {H}:echo
    needs: [a]
    when: "run.input.absent > 3 or nodes.a.output.none < 1"
  null_output:
    call: {H}:echo
    needs: [a]
    when: "not ${{{{ nodes.a.output.n }}}} and run.input.tags != []"
  membership:
    call: {H}:echo
    needs: [a]
    when: "'x' in run.input.tags and run.input.kind in ['a', 'b'] and 'k' in nodes.a.output"
"""


def test_when_reads_missing_and_null_values_as_null(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(
        load_flow_text(REFS), {"tags": ["x", "y"], "kind": "b", "k": 1, "n": None}
    )
    assert client.wait(run_id, timeout=15).state == "completed", client.list_steps(run_id)
    assert _states(db, run_id) == {
        "a": "completed",
        "missing_is_null": "completed",
        "order_with_null": "skipped",
        "null_output": "completed",
        "membership": "completed",
    }
    reason = step_row(db, run_id, "order_with_null")["skip_reason"]
    assert reason["values"] == {"run.input.absent": None, "nodes.a.output.none": None}


def test_a_condition_that_cannot_be_evaluated_discards_the_node(
    make_client: Callable[..., Client], db: Any
) -> None:
    flow = load_flow_text(
        f"""
name: bad-types
nodes:
  a: {{call: {H}:value}}
  b:
    call: {H}:echo
    needs: [a]
    when: "nodes.a.output.word < 3"
"""
    )
    client = make_client(workers=1)
    client.start()
    run_id = client.submit(flow, {"word": "three"})
    status = client.wait(run_id, timeout=15)
    assert status.state == "failed"
    row = step_row(db, run_id, "b")
    assert (row["state"], row["error_kind"]) == ("discarded", "input_error")
    assert "cannot compare a string with a number" in row["error"]
    assert conditions.calls(run_id, "b") == 0


NODE_TYPES = f"""
name: typed
nodes:
  start:
    call: {H}:value
  spread:
    type: fan_out
    call: {H}:value
    needs: [start]
    over: "${{{{ nodes.start.output.items }}}}"
    when: run.input.go
  sub:
    type: child
    flow: child.yaml
    needs: [start]
    when: run.input.go
  hold:
    type: wait_signal
    signal: go
    needs: [start]
    when: run.input.go
  after:
    call: {H}:value
    needs: [spread, sub, hold]
    on_dep_skip: run
    input: {{spread: "${{{{ nodes.spread.output }}}}", sub: "${{{{ nodes.sub.output }}}}"}}
"""


def test_skipped_fan_out_child_and_wait_signal_nodes_start_nothing(
    make_client: Callable[..., Client], db: Any, tmp_path: Path
) -> None:
    (tmp_path / "child.yaml").write_text(f"name: child\nnodes:\n  c: {{call: {H}:value}}\n")
    (tmp_path / "parent.yaml").write_text(NODE_TYPES)
    flow = load_flow(tmp_path / "parent.yaml")
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(flow, {"go": False, "items": [1, 2, 3]})
    status = client.wait(run_id, timeout=15)
    assert status.state == "completed", client.list_steps(run_id)
    states = _states(db, run_id)
    assert states == {
        "start": "completed",
        "spread": "skipped",
        "sub": "skipped",
        "hold": "skipped",
        "after": "completed",
    }
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone()[0] == 1  # no child run
    assert step_row(db, run_id, "spread")["items_total"] is None
    assert conditions.inputs(run_id, "after") == [{"spread": None, "sub": None}]
    assert status.output == {"after": {"spread": None, "sub": None}}


def test_the_same_flow_with_a_true_condition_runs_every_node_type(
    make_client: Callable[..., Client], db: Any, tmp_path: Path
) -> None:
    (tmp_path / "child.yaml").write_text(f"name: child\nnodes:\n  c: {{call: {H}:value}}\n")
    (tmp_path / "parent.yaml").write_text(NODE_TYPES)
    flow = load_flow(tmp_path / "parent.yaml")
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(flow, {"go": True, "items": [1, 2]})
    client.signal(run_id, "go", {"now": True})
    status = client.wait(run_id, timeout=15)
    assert status.state == "completed", client.list_steps(run_id)
    assert set(_states(db, run_id).values()) == {"completed"}
    assert status.output["after"]["spread"] == [1, 2]


def test_conditional_roots_at_submit_and_in_a_bulk_submit(
    make_client: Callable[..., Client], db: Any
) -> None:
    flow = load_flow_text(
        f"""
name: roots
nodes:
  maybe:
    call: {H}:value
    when: run.input.go
  always:
    call: {H}:value
  never:
    call: {H}:value
    when: false
"""
    )
    client = make_client(workers=2)
    client.start()
    one = client.submit(flow, {"go": False})
    many = client.submit_many(flow, [{"go": True}, {"go": False}])
    for run_id, go in ((one, False), (many[0], True), (many[1], False)):
        status = client.wait(run_id, timeout=15)
        assert status.state == "completed", client.list_steps(run_id)
        states = _states(db, run_id)
        assert states["maybe"] == ("completed" if go else "skipped")
        assert (states["always"], states["never"]) == ("completed", "skipped")
        assert set(status.output) == ({"maybe", "always"} if go else {"always"})
        assert step_row(db, run_id, "never")["skip_reason"] == {"when": "false", "values": {}}


def test_a_run_whose_only_leaf_is_skipped_completes_with_an_empty_output(
    make_client: Callable[..., Client], db: Any
) -> None:
    flow = load_flow_text(
        f"""
name: leafless
nodes:
  a: {{call: {H}:value}}
  b: {{call: {H}:value, needs: [a], when: "run.input.n > 1"}}
"""
    )
    client = make_client(workers=1)
    client.start()
    run_id = client.submit(flow, {"n": 1})
    status = client.wait(run_id, timeout=15)
    assert (status.state, status.output) == ("completed", {})
    assert _states(db, run_id) == {"a": "completed", "b": "skipped"}


DIAMOND = """
name: cond-diamond
nodes:
  a:
    call: cyclone_test_handlers.basic:echo
  b:
    call: cyclone_test_handlers.engine:fanin_branch
    needs: [a]
  c:
    call: cyclone_test_handlers.engine:fanin_branch
    needs: [a]
  d:
    call: cyclone_test_handlers.engine:count_exec
    needs: [b, c]
    when: WHEN
"""


def test_two_parents_completing_at_once_decide_the_condition_once(
    make_client: Callable[..., Client], db: Any, schema: str
) -> None:
    """b and c meet at a barrier so their completions commit together; d's condition is
    decided by whichever completion releases it, once: d runs exactly once when it holds,
    and is skipped once (one skipped event) when it does not."""
    create_ledger(db)
    events: list[StepEvent] = []
    client = make_client(workers=3, on_step_event=events.append)
    client.start()
    for when, runs_d in (
        ("nodes.b.output.node == 'b'", True),
        ("nodes.c.output.node == 'b'", False),
    ):
        flow = load_flow_text(DIAMOND.replace("WHEN", json.dumps(when)))
        for _ in range(10):  # one at a time: b and c of a run meet at a barrier
            run_id = client.submit(flow, {"schema": schema})
            status = client.wait(run_id, timeout=15)
            assert status.state == "completed", client.list_steps(run_id)
            d = step_row(db, run_id, "d")
            if runs_d:
                assert engine.executions(run_id, "d") == 1
                assert (d["state"], d["lease_generation"]) == ("completed", 1)
                assert sorted(r[1] for r in ledger_rows(db, run_id)) == ["b", "c", "d"]
            else:
                assert engine.executions(run_id, "d") == 0
                assert d["state"] == "skipped"
                assert d["skip_reason"]["values"] == {"nodes.c.output.node": "c"}
    # events are reported after the commit: wait for the last one, then count them
    wait_until(lambda: len([e for e in events if e.kind == "skipped"]) >= 10, what="events")
    skipped = [e for e in events if e.kind == "skipped"]
    assert len(skipped) == 10 and len({e.run_id for e in skipped}) == 10

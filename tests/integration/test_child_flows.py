"""Child nodes: a separate run of a second flow, started in the transaction that releases
the node; its output becomes the node's output; failure, cancellation and max_wait
(Engine Design: Why Static DAGs, Failure Propagation)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.engine import wait_scanner
from helpers.procs import wait_until

from cyclone_flow import RunStateError, load_flow

PARENT = """
name: parent
nodes:
  prepare:
    call: cyclone_test_handlers.basic:add
    input: {a: "${{ run.input.a }}", b: 1}
  sub:
    type: child
    flow: sub/child.yaml
    needs: [prepare]
    input: {value: "${{ nodes.prepare.output.sum }}", mode: "${{ run.input.mode }}"}
    MAX_WAIT
  after:
    call: cyclone_test_handlers.basic:echo
    needs: [sub]
    input: {got: "${{ nodes.sub.output }}"}
"""

CHILD = """
name: child
input_schema:
  type: object
  properties:
    value: {type: integer}
    mode: {type: string, default: ok}
  required: [value]
nodes:
  double:
    call: cyclone_test_handlers.basic:add
    input: {a: "${{ run.input.value }}", b: "${{ run.input.value }}"}
  maybe:
    call: cyclone_test_handlers.node_types:child_step
    needs: [double]
    input: {sum: "${{ nodes.double.output.sum }}", mode: "${{ run.input.mode }}"}
"""


def _write(tmp_path: Path, max_wait: str = "") -> Path:
    (tmp_path / "sub").mkdir(exist_ok=True)
    (tmp_path / "sub" / "child.yaml").write_text(CHILD)
    parent = tmp_path / "parent.yaml"
    parent.write_text(PARENT.replace("MAX_WAIT", f"max_wait: {max_wait}" if max_wait else ""))
    return parent


def _child_run(db: psycopg.Connection[Any], run_id: str) -> tuple[str, str, str]:
    row = db.execute(
        "SELECT id::text, state, parent_node FROM cyclone_runs WHERE parent_run_id = %s", (run_id,)
    ).fetchone()
    assert row is not None
    return row


def test_child_output_becomes_the_node_output(make_client, db, tmp_path) -> None:
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(load_flow(_write(tmp_path)), {"a": 4, "mode": "ok"})
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", client.list_steps(run_id)
    child_output = {"maybe": {"sum": 10, "mode": "ok"}}
    assert status.output == {"after": {"got": child_output}}
    child_id, child_state, parent_node = _child_run(db, run_id)
    assert (child_state, parent_node) == ("completed", "sub")
    child = client.get_run(child_id)
    assert (child.parent_run_id, child.parent_node, child.flow_name) == (run_id, "sub", "child")
    assert child.input == {"value": 5, "mode": "ok"}
    sub = next(s for s in client.list_steps(run_id) if s.node == "sub")
    assert (sub.type, sub.child_run_id, sub.output) == ("child", child_id, child_output)
    # the child run (its deps rows, never updated) was inserted by the transaction that
    # completed `prepare`
    same_tx = db.execute(
        "SELECT (SELECT xmin FROM cyclone_deps WHERE run_id = %s)"
        " = (SELECT xmin FROM cyclone_steps WHERE run_id = %s AND node = 'prepare')",
        (child_id, run_id),
    ).fetchone()
    assert same_tx == (True,)
    # both definitions are stored; the parent's refers to the child's
    assert db.execute("SELECT count(*) FROM cyclone_workflows").fetchone() == (2,)


def test_a_failed_child_discards_the_node_and_fails_the_parent(make_client, db, tmp_path) -> None:
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(load_flow(_write(tmp_path)), {"a": 1, "mode": "fail"})
    status = client.wait(run_id, timeout=20)
    assert (status.state, status.error_kind) == ("failed", "step_discarded")
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert (steps["sub"].state, steps["sub"].error_kind) == ("discarded", "child_failed")
    assert "child run" in (steps["sub"].error or "") and "failed" in (steps["sub"].error or "")
    assert steps["after"].state == "cancelled"
    child_id, child_state, _ = _child_run(db, run_id)
    assert child_state == "failed"
    with pytest.raises(RunStateError, match="child run of run"):
        client.retry(child_id)


def test_retry_of_the_parent_starts_a_new_child_run(make_client, db, tmp_path) -> None:
    client = make_client(workers=2)
    client.start()
    mode = f"fail_once_{uuid.uuid4().hex}"
    run_id = client.submit(load_flow(_write(tmp_path)), {"a": 1, "mode": mode})
    assert client.wait(run_id, timeout=20).state == "failed"
    first_child = _child_run(db, run_id)[0]
    assert set(client.retry(run_id)) == {"sub", "after"}
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", client.list_steps(run_id)
    assert status.output == {"after": {"got": {"maybe": {"sum": 4, "mode": mode}}}}
    children = db.execute(
        "SELECT id::text, state FROM cyclone_runs WHERE parent_run_id = %s ORDER BY created_at",
        (run_id,),
    ).fetchall()
    assert children[0] == (first_child, "failed")
    assert len(children) == 2 and children[1][1] == "completed"
    sub = next(s for s in client.list_steps(run_id) if s.node == "sub")
    assert sub.child_run_id == children[1][0]


def test_child_input_must_match_the_child_input_schema(make_client, tmp_path) -> None:
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(load_flow(_write(tmp_path)), {"a": 1.5, "mode": "ok"})
    status = client.wait(run_id, timeout=20)
    assert status.state == "failed"
    sub = next(s for s in client.list_steps(run_id) if s.node == "sub")
    assert (sub.state, sub.error_kind) == ("discarded", "input_error")
    assert "child input" in (sub.error or "") and "integer" in (sub.error or "")


def test_a_child_that_outlives_max_wait_is_cancelled(make_client, db, tmp_path) -> None:
    # the client's own maintenance loop must not run the wait scanner before this test's
    client = make_client(workers=2, sweep_interval=30.0)
    client.start()
    run_id = client.submit(load_flow(_write(tmp_path, max_wait="500ms")), {"a": 1, "mode": "hang"})
    wait_until(
        lambda: db.execute(
            "SELECT 1 FROM cyclone_steps s JOIN cyclone_runs r ON r.id = s.run_id"
            " WHERE r.parent_run_id = %s AND s.node = 'maybe' AND s.state = 'running'",
            (run_id,),
        ).fetchone(),
        what="the child's step to run",
    )
    scanner = wait_scanner(client)
    assert scanner.run_once().expired == 0  # not expired yet (500ms from the child's start)
    wait_until(
        lambda: (
            db.execute(
                "SELECT now() >= wait_until FROM cyclone_steps WHERE run_id = %s AND node = 'sub'",
                (run_id,),
            ).fetchone()
            == (True,)
        ),
        what="max_wait to pass",
    )
    assert scanner.run_once().expired == 1
    assert scanner.run_once().expired == 0  # a guarded CAS: never twice
    status = client.get_run(run_id)
    assert (status.state, status.error_kind) == ("failed", "step_discarded")
    sub = next(s for s in client.list_steps(run_id) if s.node == "sub")
    assert (sub.state, sub.error_kind) == ("discarded", "timeout")
    child_id, child_state, _ = _child_run(db, run_id)
    assert child_state == "cancelled"
    # the child's running handler learns it on its next heartbeat
    wait_until(lambda: client.in_flight() == 0, what="the child handler to stop")
    maybe = next(s for s in client.list_steps(child_id) if s.node == "maybe")
    assert (maybe.state, maybe.output) == ("cancelled", None)


def test_cancelling_the_parent_cancels_the_whole_child_tree(make_client, db, tmp_path) -> None:
    (tmp_path / "grandchild.yaml").write_text(
        "name: grandchild\nnodes:\n  hang:\n"
        "    call: cyclone_test_handlers.node_types:wait_cancelled\n"
    )
    (tmp_path / "middle.yaml").write_text(
        "name: middle\nnodes:\n  deeper: {type: child, flow: grandchild.yaml}\n"
    )
    (tmp_path / "top.yaml").write_text(
        "name: top\nnodes:\n  sub: {type: child, flow: middle.yaml}\n"
    )
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(load_flow(tmp_path / "top.yaml"))
    wait_until(
        lambda: db.execute(
            "SELECT 1 FROM cyclone_steps WHERE node = 'hang' AND state = 'running'"
        ).fetchone(),
        what="the grandchild's step to run",
    )
    runs = db.execute("SELECT count(*) FROM cyclone_runs WHERE state = 'running'").fetchone()
    assert runs == (3,)
    assert client.cancel(run_id)
    states = db.execute("SELECT flow_name, state FROM cyclone_runs ORDER BY flow_name").fetchall()
    assert states == [("grandchild", "cancelled"), ("middle", "cancelled"), ("top", "cancelled")]
    wait_until(lambda: client.in_flight() == 0, what="the grandchild handler to stop")
    hang = db.execute("SELECT state, output FROM cyclone_steps WHERE node = 'hang'").fetchone()
    assert hang == ("cancelled", None)


def test_cancelling_a_child_discards_its_parent_node(make_client, db, tmp_path) -> None:
    (tmp_path / "hang.yaml").write_text(
        "name: hang\nnodes:\n  hang:\n    call: cyclone_test_handlers.node_types:wait_cancelled\n"
    )
    (tmp_path / "top.yaml").write_text(
        "name: top\nnodes:\n"
        "  sub: {type: child, flow: hang.yaml}\n"
        "  after: {call: 'cyclone_test_handlers.basic:echo', needs: [sub],"
        " on_dep_failure: cancel_branch}\n"
        "  side: {call: 'cyclone_test_handlers.basic:echo'}\n"
    )
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(load_flow(tmp_path / "top.yaml"), {"x": 1})
    child_id = wait_until(
        lambda: db.execute(
            "SELECT id::text FROM cyclone_runs WHERE parent_run_id = %s", (run_id,)
        ).fetchone(),
        what="the child run",
    )[0]
    assert client.cancel(child_id)
    status = client.wait(run_id, timeout=10)
    assert status.state == "completed"  # contained by cancel_branch
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert (steps["sub"].state, steps["sub"].error_kind) == ("discarded", "child_failed")
    assert steps["after"].state == "cancelled"


def test_parent_and_child_transitions_do_not_deadlock(make_client, db, tmp_path) -> None:
    """A parent cancel racing its child's completion: both lock the top run first."""
    (tmp_path / "quick.yaml").write_text(
        "name: quick\nnodes:\n  a: {call: 'cyclone_test_handlers.basic:echo'}\n"
    )
    (tmp_path / "top.yaml").write_text(
        "name: top\nnodes:\n"
        + "".join(f"  c{i}: {{type: child, flow: quick.yaml}}\n" for i in range(8))
    )
    client = make_client(workers=4)
    client.start()
    flow = load_flow(tmp_path / "top.yaml")
    runs = [client.submit(flow, {"i": i}) for i in range(6)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def cancel_all() -> None:
        barrier.wait()
        for rid in runs:
            try:
                client.cancel(rid)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

    thread = threading.Thread(target=cancel_all)
    thread.start()
    barrier.wait()
    thread.join(30)
    assert not errors
    for rid in runs:
        assert client.wait(rid, timeout=20).state in ("completed", "cancelled")
    wait_until(
        lambda: (
            db.execute("SELECT count(*) FROM cyclone_runs WHERE state = 'running'").fetchone()
            == (0,)
        ),
        what="every child run to end",
    )

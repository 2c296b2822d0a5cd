"""Node types (fan_out, child, wait_signal) under the submission options of the queue
features: one insert path (the definition's plan, inserted in SQL) applies queue/priority
overrides, delays, unique keys and sequences, records the submitting client's limits on
the run row, and serves submit, submit_tx, enqueue, ctx.submit_completion and schedule
ticks alike (Engine Design: Why Static DAGs; seeds: Queues and Priority, Unique Jobs,
Sequences, Transactional Enqueueing; Client Options: Limits and Retention,
WithMaxSignalWait)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from helpers.procs import wait_until
from helpers.rows import step_columns

from cyclone_flow import Client, PayloadLimits, load_flow

H = "cyclone_test_handlers.node_types"
ECHO = "cyclone_test_handlers.basic:echo"

PARENT = f"""
name: mixed
deadline: 1h
nodes:
  make:
    call: {H}:numbers
    input: {{n: "${{{{ run.input.n }}}}"}}
  each:
    type: fan_out
    needs: [make]
    over: "${{{{ nodes.make.output.items }}}}"
    call: {H}:square
    max_parallel: 2
  pinned:
    call: {ECHO}
    queue: gpu
    priority: 5
  sub:
    type: child
    flow: kid.yaml
    input: {{name: "${{{{ run.input.label }}}}"}}
"""

KID = f"""
name: kid
input_schema:
  type: object
  properties: {{name: {{type: string}}}}
nodes:
  hello: {{call: {ECHO}}}
"""

ROOTS = f"""
name: roots
deadline: 1h
nodes:
  each:
    type: fan_out
    over: "${{{{ run.input.items }}}}"
    call: {H}:square
  sub:
    type: child
    flow: kid.yaml
    input: {{name: roots}}
  after:
    call: {ECHO}
    needs: [each, sub]
"""

WAITS = f"""
name: waits
nodes:
  go:
    type: wait_signal
    signal: go
  done:
    call: {ECHO}
    needs: [go]
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / "kid.yaml").write_text(KID)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def _steps(db: psycopg.Connection[Any], run_id: str) -> dict[str, tuple[Any, ...]]:
    return step_columns(db, run_id, "state", "queue", "priority", "scheduled_at", "started_at")


def _child_id(db: psycopg.Connection[Any], run_id: str) -> str | None:
    row = db.execute(
        "SELECT id::text FROM cyclone_runs WHERE parent_run_id = %s", (run_id,)
    ).fetchone()
    return None if row is None else str(row[0])


def test_queue_and_priority_override_reaches_items_but_not_child_runs(
    make_client: Callable[..., Client], db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    client = make_client(worker_queues={"bulk": 2, "gpu": 1, "default": 1})
    flow = load_flow(_write(tmp_path, "mixed", PARENT))
    run_id = client.submit(flow, {"n": 5, "label": "x"}, queue="bulk", priority=-3)
    client.start()
    assert client.wait(run_id, timeout=20).state == "completed"
    steps = _steps(db, run_id)
    for node in ("make", "each", *(f"each[{i}]" for i in range(5))):
        assert steps[node][1:3] == ("bulk", -3), node
    assert steps["pinned"][1:3] == ("gpu", 5)  # its own queue and priority win
    child = _child_id(db, run_id)
    assert child is not None
    assert _steps(db, child)["hello"][1:3] == ("default", 0)  # the child flow's own
    assert client.get_run(run_id).output["each"] == [0, 1, 4, 9, 16]  # type: ignore[index]
    # the stored definition is the flow's, whoever overrode what
    plan = db.execute("SELECT plan FROM cyclone_workflows WHERE name = 'mixed'").fetchone()
    assert plan is not None
    queues = {n["node"]: (n["queue"], n["queue_own"]) for n in plan[0]["nodes"]}
    assert queues == {
        "make": ("default", False),
        "each": ("default", False),
        "pinned": ("gpu", True),
        "sub": ("default", False),
    }


def test_a_delayed_run_with_fan_out_and_child_roots_starts_nothing_early(
    make_client: Callable[..., Client], db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    client = make_client(workers=2)
    flow = load_flow(_write(tmp_path, "roots", ROOTS))
    now = db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    run_at = now + timedelta(seconds=2)
    run_id = client.submit(flow, {"items": [1, 2, 3]}, run_at=run_at)
    # the roots are started at submit, but nothing they made is claimable before run_at
    steps = _steps(db, run_id)
    assert steps["each"][0] == "waiting" and steps["sub"][0] == "waiting"
    for i in range(3):
        assert steps[f"each[{i}]"][0] == "available"
        assert steps[f"each[{i}]"][3] == run_at
    child = _child_id(db, run_id)
    assert child is not None
    assert _steps(db, child)["hello"][3] == run_at
    deadline = db.execute(
        "SELECT deadline_at FROM cyclone_runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert deadline == (run_at + timedelta(hours=1),)  # the deadline counts from the start
    client.start()
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", client.list_steps(run_id)
    started = db.execute(  # every handler call: items, the child's step, the action
        "SELECT count(*), min(started_at) FROM cyclone_steps"
        " WHERE run_id IN (%s, %s) AND type IN ('action', 'fan_out_item')",
        (run_id, child),
    ).fetchone()
    assert started is not None and started[0] == 5 and started[1] >= run_at


def test_a_sequence_holds_a_run_with_a_child_root_until_the_signal_run_completes(
    make_client: Callable[..., Client], db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    client = make_client(workers=2)
    first = client.submit(load_flow(_write(tmp_path, "waits", WAITS)), None, sequence="s")
    second = client.submit(
        load_flow(_write(tmp_path, "roots", ROOTS)), {"items": [2]}, sequence="s"
    )
    client.start()
    # the held run started no node: no item, no child run, every step pending
    wait_until(
        lambda: _steps(db, first)["go"][0] == "waiting", what="the first run waits its signal"
    )
    assert {s[0] for s in _steps(db, second).values()} == {"pending"}
    assert _child_id(db, second) is None
    before_signal = db.execute("SELECT now()").fetchone()
    assert client.signal(first, "go", {"ok": True}) == "go"
    assert client.wait(first, timeout=20).state == "completed"
    assert client.wait(second, timeout=20).state == "completed", client.list_steps(second)
    child = _child_id(db, second)
    assert child is not None
    created = db.execute("SELECT created_at FROM cyclone_runs WHERE id = %s", (child,)).fetchone()
    assert before_signal is not None and created is not None
    assert created[0] >= before_signal[0]  # started by the release, not at submit
    # a child run is not part of the sequence and holds no unique key
    info = client.get_queue_info(child)
    assert info is not None
    assert (info["sequence_key"], info["unique_key"], info["sequence_held"]) == (None, None, False)


def test_a_unique_key_on_a_waiting_run_and_the_run_row_limits(
    make_client: Callable[..., Client],
    db: psycopg.Connection[Any],
    database_url: str,
    tmp_path: Path,
) -> None:
    client = make_client(max_signal_wait=30, payload_limits=PayloadLimits(output_bytes=50_000))
    flow = load_flow(_write(tmp_path, "waits", WAITS))
    first = client.submit(flow, None, unique_key="approval-7")
    again = client.submit(flow, None, unique_key="approval-7")
    assert again == first and again.duplicate and not first.duplicate
    with psycopg.connect(database_url) as conn:  # the caller's transaction, committed
        in_tx = client.submit_tx(conn, flow, None)
        job = client.enqueue_tx(conn, ECHO, {"x": 1}, delay=60)
    for rid in (first, in_tx, job):
        row = db.execute(
            "SELECT output_limit, extract(epoch FROM max_signal_wait) FROM cyclone_runs"
            " WHERE id = %s",
            (rid,),
        ).fetchone()
        assert row == (50_000, 30), rid
    # the wait_signal root started at submit under the submitting client's max_signal_wait
    wait = db.execute(
        "SELECT extract(epoch FROM wait_until - started_at) FROM cyclone_steps"
        " WHERE run_id = %s AND node = 'go'",
        (first,),
    ).fetchone()
    assert wait is not None and abs(float(wait[0]) - 30) < 1
    count = db.execute("SELECT count(*) FROM cyclone_runs WHERE flow_name = 'waits'").fetchone()
    assert count == (2,)


def test_submit_completion_and_a_schedule_tick_of_a_flow_with_a_child_node(
    make_client: Callable[..., Client], db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    parent = tmp_path / "outer.yaml"
    parent.write_text(
        """
name: outer
nodes:
  kid:
    type: child
    flow: kid.yaml
    input: {name: "${{ run.input.name }}"}
"""
    )
    (tmp_path / "kid.yaml").write_text(KID)
    client = make_client(workers=2)
    via_handler = client.enqueue(
        "cyclone_test_handlers.queueing:submit_flow", {"flow": str(parent)}
    )
    name = client.add_schedule(load_flow(parent), "* * * * *", input={"name": "tick"})
    schedule = client.get_schedule(name)
    assert schedule is not None
    assert client.schedule_scanner.run_once(now=schedule.next_run_at).submitted == 1
    client.start()
    assert client.wait(via_handler, timeout=20).state == "completed"
    outer_runs = db.execute(
        "SELECT id::text, input->>'name' FROM cyclone_runs WHERE flow_name = 'outer'"
    ).fetchall()
    assert len(outer_runs) == 2
    for rid, run_name in outer_runs:
        status = client.wait(rid, timeout=20)
        assert status.state == "completed", client.list_steps(rid)
        assert status.output == {"kid": {"hello": {"name": run_name}}}
    assert {r[1] for r in outer_runs} == {"tick", f"run {via_handler[:8]}"}

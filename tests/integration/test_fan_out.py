"""Fan-out nodes: item steps inserted with the upstream completion, max_parallel across
workers, ordered output, limits, and failing items under both policies (Engine Design:
Why Static DAGs, Failure Propagation; Client Options: Limits and Retention)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.procs import WorkerProcess, wait_until

from cyclone_flow import MAX_FAN_OUT_ITEMS, Client, PayloadLimits
from cyclone_flow.flowfile import load_flow_text

H = "cyclone_test_handlers.node_types"


def _flow(text: str) -> Any:
    return load_flow_text(text.replace("H:", f"{H}:"))


SQUARES = _flow(
    """
name: squares
nodes:
  make:
    call: H:numbers
  each:
    type: fan_out
    needs: [make]
    over: "${{ nodes.make.output.items }}"
    call: H:square
    max_parallel: MAXP
  total:
    call: cyclone_test_handlers.basic:echo
    needs: [each]
    input: {count: "${{ nodes.each.output }}"}
""".replace("MAXP", "4")
)


def _items(db: psycopg.Connection[Any], run_id: str, node: str) -> dict[str, int]:
    rows = db.execute(
        "SELECT state, count(*) FROM cyclone_steps WHERE run_id = %s AND parent_node = %s"
        " GROUP BY state",
        (run_id, node),
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def test_small_fan_out_passes_items_in_order_and_runs_dependents(make_client, db) -> None:
    events: list[Any] = []
    client = make_client(workers=3, on_step_event=events.append)
    run_id = client.submit(SQUARES, {"n": 7})
    client.start()
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", client.list_steps(run_id)
    squares = [i * i for i in range(7)]
    assert status.output == {"total": {"count": squares}}
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert steps["each"].output == squares
    assert (steps["each"].items_done, steps["each"].items_total) == (7, 7)
    assert steps["each[3]"].parent_node == "each" and steps["each[3]"].item_index == 3
    assert steps["each[3]"].type == "fan_out_item"
    assert _items(db, run_id, "each") == {"completed": 7}
    # the engine's completion of the fan-out node is an event too
    completed = [e.node for e in events if e.kind == "completed"]
    assert completed.count("each") == 1 and completed.index("each") > completed.index("each[6]")
    # items never count as leaves of the run, and status can hide them
    assert [s.node for s in client.list_steps(run_id, items=False)] == ["make", "each", "total"]


def test_item_input_template_and_context(make_client) -> None:
    flow = _flow(
        """
name: item-input
nodes:
  each:
    type: fan_out
    over: "${{ run.input.things }}"
    call: H:item_info
    input: {thing: "${{ item.name }}", tag: "${{ run.input.tag }}"}
"""
    )
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(flow, {"things": [{"name": "a"}, {"name": "b"}], "tag": "t"})
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", client.list_steps(run_id)
    assert status.output == {
        "each": [
            {"input": {"thing": "a", "tag": "t"}, "node": "each[0]", "index": 0},
            {"input": {"thing": "b", "tag": "t"}, "node": "each[1]", "index": 1},
        ]
    }


def test_empty_list_completes_at_once_with_an_empty_list(make_client) -> None:
    client = make_client()
    run_id = client.submit(SQUARES, {"n": 0})
    client.start()
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed"
    assert status.output == {"total": {"count": []}}
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert steps["each"].output == [] and steps["each"].items_total == 0


def test_literal_list_at_submit_needs_no_worker_for_an_empty_one(make_client) -> None:
    flow = _flow(
        """
name: literal
nodes:
  each:
    type: fan_out
    over: []
    call: H:square
"""
    )
    client = make_client()
    run_id = client.submit(flow)
    # started in the submit transaction: the run is complete without any worker
    assert client.get_run(run_id).state == "completed"
    assert client.get_run(run_id).output == {"each": []}


def test_list_over_the_limit_discards_the_node_without_inserting_items(make_client, db) -> None:
    flow = _flow(
        """
name: too-many
nodes:
  each:
    type: fan_out
    over: "${{ run.input.items }}"
    call: H:square
"""
    )
    client = make_client()
    run_id = client.submit(flow, {"items": [0] * (MAX_FAN_OUT_ITEMS + 1)})
    status = client.get_run(run_id)
    assert (status.state, status.error_kind) == ("failed", "step_discarded")
    (step,) = client.list_steps(run_id)
    assert (step.state, step.error_kind) == ("discarded", "fan_out_too_large")
    assert f"has {MAX_FAN_OUT_ITEMS + 1} items" in (step.error or "")
    assert _items(db, run_id, "each") == {}


def test_over_that_is_not_a_list_discards_the_node(make_client) -> None:
    flow = _flow(
        """
name: not-a-list
nodes:
  each:
    type: fan_out
    over: "${{ run.input.items }}"
    call: H:square
  other:
    type: fan_out
    over: "${{ run.input.missing }}"
    call: H:square
    on_dep_failure: cancel_branch
"""
    )
    client = make_client()
    run_id = client.submit(flow, {"items": {"a": 1}})
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert (steps["each"].state, steps["each"].error_kind) == ("discarded", "input_error")
    assert "a JSON object, not a list" in (steps["each"].error or "")
    assert client.get_run(run_id).state == "failed"


def test_collected_output_over_the_submitting_clients_limit(make_client) -> None:
    # Items of 100 bytes each fit the item limit; their list of 20 does not fit 1,000 bytes.
    flow = _flow(
        """
name: big-output
nodes:
  each:
    type: fan_out
    over: "${{ run.input.items }}"
    call: cyclone_test_handlers.basic:echo
"""
    )
    submitter = make_client(payload_limits=PayloadLimits(output_bytes=1_000))
    run_id = submitter.submit(flow, {"items": ["x" * 100] * 20})
    worker = make_client(workers=4)  # its own limit (1 MiB) applies to each item only
    worker.start()
    status = worker.wait(run_id, timeout=20)
    assert (status.state, status.error_kind) == ("failed", "step_discarded")
    each = next(s for s in worker.list_steps(run_id) if s.node == "each")
    assert (each.state, each.error_kind) == ("discarded", "payload_too_large")
    assert "over the limit of 1000 bytes" in (each.error or "")
    assert each.output is None


FAILING = """
name: failing-items
nodes:
  each:
    type: fan_out
    over: "${{ run.input.items }}"
    call: H:fail_on
    input: {value: "${{ item }}", bad: "${{ run.input.bad }}"}
    max_parallel: 2
    retry: {max_attempts: 2, backoff: {initial: 0s, max: 0s}}
  after:
    call: cyclone_test_handlers.basic:echo
    needs: [each]
    on_dep_failure: POLICY
  side:
    call: cyclone_test_handlers.basic:echo
"""


def test_failing_item_fails_the_run_under_fail_run(make_client, db) -> None:
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(
        _flow(FAILING.replace("POLICY", "fail_run")), {"items": list(range(10)), "bad": 3}
    )
    status = client.wait(run_id, timeout=20)
    assert (status.state, status.error_kind) == ("failed", "step_discarded")
    assert "item each[3] was discarded" in (status.error or "")
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert (steps["each[3]"].state, steps["each[3]"].error_kind) == ("discarded", "handler_error")
    assert steps["each[3]"].attempt == 1  # PermanentError: no second attempt
    assert (steps["each"].state, steps["each"].error_kind) == ("discarded", "item_failed")
    assert steps["after"].state == "cancelled"
    items = _items(db, run_id, "each")
    assert set(items) <= {"completed", "discarded", "cancelled"}
    assert items["discarded"] == 1 and items.get("cancelled", 0) >= 1  # later items never ran


def test_failing_item_is_contained_under_cancel_branch(make_client, db) -> None:
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(
        _flow(FAILING.replace("POLICY", "cancel_branch")), {"items": list(range(10)), "bad": 3}
    )
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", client.list_steps(run_id)
    assert status.output == {"side": {"items": list(range(10)), "bad": 3}}
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert (steps["each"].state, steps["each"].error_kind) == ("discarded", "item_failed")
    assert (steps["after"].state, steps["after"].error_kind) == ("cancelled", "cancelled")
    assert set(_items(db, run_id, "each")) <= {"completed", "discarded", "cancelled"}


def test_retry_of_a_failed_fan_out_keeps_completed_items(make_client, db) -> None:
    flow = _flow(FAILING.replace("POLICY", "fail_run").replace("H:fail_on", "H:fail_first_time_on"))
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(flow, {"items": list(range(6)), "bad": 3})
    assert client.wait(run_id, timeout=20).state == "failed"
    done_before = db.execute(
        "SELECT node, finished_at FROM cyclone_steps WHERE run_id = %s AND parent_node = 'each'"
        " AND state = 'completed'",
        (run_id,),
    ).fetchall()
    assert done_before
    assert {"each", "after"} <= set(client.retry(run_id))
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", client.list_steps(run_id)
    each = next(s for s in client.list_steps(run_id) if s.node == "each")
    assert each.output == list(range(6))
    for node, finished in done_before:
        row = db.execute(
            "SELECT finished_at FROM cyclone_steps WHERE run_id = %s AND node = %s", (run_id, node)
        ).fetchone()
        assert row == (finished,)  # completed items were not run again


def test_many_items_ordered_and_never_above_max_parallel(
    make_client: Callable[..., Client], database_url: str, schema: str, tmp_path: Path
) -> None:
    """500 items on two real worker processes (4 threads each), max_parallel 8: the
    database never shows more than 8 items available or running at once (the 10,000-item
    volume: the ``--soak`` variant below)."""
    _many_items(make_client, database_url, schema, tmp_path, n=500)


@pytest.mark.slow
def test_ten_thousand_items_ordered_and_never_above_max_parallel(
    make_client: Callable[..., Client], database_url: str, schema: str, tmp_path: Path
) -> None:
    """The same with 10,000 items (``--soak``: volume, not behaviour)."""
    _many_items(make_client, database_url, schema, tmp_path, n=10_000)


def _many_items(
    make_client: Callable[..., Client], database_url: str, schema: str, tmp_path: Path, n: int
) -> None:
    """``n`` items on two real worker processes (4 threads each), max_parallel 8: the
    output is ordered, the database never shows more than 8 items available or running
    at once, and both processes took items (both are up before the run is submitted)."""
    max_parallel = 8
    flow = _flow(_big_flow(max_parallel))
    client = make_client()
    workers = [
        WorkerProcess(database_url, schema, tmp_path / f"worker{i}.log", workers=4, lease_ttl="5s")
        for i in range(2)
    ]
    try:
        for worker in workers:
            wait_until(lambda w=worker: " started: " in w.log(), timeout=60, what="the workers")
        run_id = client.submit(flow, {"n": n})
        peaks: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            with psycopg.connect(database_url, autocommit=True) as conn:
                while not stop.is_set():
                    row = conn.execute(  # served by the partial index of active items
                        f"SELECT count(*) FILTER (WHERE state = 'running'), count(*)"
                        f' FROM "{schema}".cyclone_steps WHERE run_id = %s'
                        f" AND parent_node = 'each' AND state IN ('running', 'available')",
                        (run_id,),
                    ).fetchone()
                    assert row is not None
                    peaks.append(max(row[0], row[1]))
                    time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        try:
            status = client.wait(run_id, timeout=240)
        finally:
            elapsed = time.monotonic() - started
            stop.set()
            sampler.join(5)
    finally:
        for worker in workers:
            worker.terminate()
    assert status.state == "completed", status
    assert status.output == {"total": {"count": [i * i for i in range(n)]}}
    assert len(peaks) > 50, "the sampler must have watched the run"
    assert max(peaks) <= max_parallel
    assert max(peaks) > 1  # items really ran in parallel
    with psycopg.connect(database_url, autocommit=True) as conn:
        owners = conn.execute(
            f'SELECT DISTINCT lease_owner FROM "{schema}".cyclone_steps'
            " WHERE run_id = %s AND parent_node = 'each'",
            (run_id,),
        ).fetchall()
    claimed_by = {r[0] for r in owners}
    assert len(claimed_by) == 2  # both worker processes took items
    print(f"{n:,} items in {elapsed:.1f}s, {len(peaks)} samples, peak {max(peaks)}")


def _big_flow(max_parallel: int) -> str:
    return f"""
name: squares-big
nodes:
  make:
    call: H:numbers
  each:
    type: fan_out
    needs: [make]
    over: "${{{{ nodes.make.output.items }}}}"
    call: H:square
    max_parallel: {max_parallel}
  total:
    call: cyclone_test_handlers.basic:echo
    needs: [each]
    input: {{count: "${{{{ nodes.each.output }}}}"}}
"""

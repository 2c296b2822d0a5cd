"""Exactly-once effects through ``ctx.completion_tx()`` (Engine Design: ctx.CompletionTx():
The Exactly-Once-Effects Wedge): a crash, a stale completion and a raising handler all
roll the business write back with the step's transition."""

from __future__ import annotations

import os
import uuid

import pytest
from cyclone_test_handlers import engine
from helpers.engine import sweep_once
from helpers.flows import step_flow
from helpers.procs import WorkerProcess, wait_until
from helpers.rows import create_ledger, ledger_rows, step_row

ENGINE = "cyclone_test_handlers.engine"


@pytest.mark.chaos
def test_sigkill_before_commit_rerun_writes_exactly_once(
    make_client, db, schema, database_url, tmp_path
) -> None:
    create_ledger(db)
    marker = tmp_path / "written"
    submitter = make_client()
    run_id = submitter.submit(
        step_flow(f"{ENGINE}:crash_once", name="once"),
        {"schema": schema, "marker": str(marker), "sleep": 60},
    )
    victim = WorkerProcess(database_url, schema, tmp_path / "victim.log", lease_ttl="1s")
    try:
        wait_until(marker.exists, timeout=20, what="the handler to write its business row")
        row = step_row(db, run_id)
        assert row["state"] == "running"
        assert row["lease_owner"].split("/")[1] == str(victim.pid)
        assert ledger_rows(db, run_id) == []  # written, not committed
    finally:
        victim.kill()

    rescuer = make_client(workers=1, lease_ttl=1.0)
    rescuer.start()
    status = rescuer.wait(run_id, timeout=15)
    assert status.state == "completed", (status, rescuer.list_steps(run_id), victim.log())
    assert ledger_rows(db, run_id) == [(run_id, "s", f"pid{os.getpid()}", os.getpid())]
    row = step_row(db, run_id)
    assert (row["state"], row["attempt"], row["reclaims"], row["lease_generation"]) == (
        "completed",
        1,
        1,
        2,
    )
    assert row["errors"] == []
    assert row["output"] == {"pid": os.getpid(), "attempt": 1}


def test_stale_completion_rolls_back_business_write(make_client, db, schema) -> None:
    create_ledger(db)
    key = uuid.uuid4().hex
    # A long TTL: no heartbeat (every 20 s) interferes while the test expires the lease.
    first = make_client(workers=1, lease_ttl=60.0, client_id="first", sweep_interval=60.0)
    first.start()
    run_id = first.submit(step_flow(f"{ENGINE}:gate", name="once"), {"schema": schema, "key": key})
    assert engine.event(key, "entered").wait(10), "the first handler never started"
    assert step_row(db, run_id)["lease_owner"] == "first"

    db.execute(
        "UPDATE cyclone_steps SET lease_expiry = now() - interval '1 second' WHERE run_id = %s",
        (run_id,),
    )
    assert sweep_once(first) == {"timed_out": 0, "reclaim_limit": 0, "rescued": 1}
    second = make_client(workers=1, lease_ttl=60.0, client_id="second", sweep_interval=60.0)
    second.start()
    status = second.wait(run_id, timeout=10)
    assert status.state == "completed", (status, second.list_steps(run_id))

    engine.event(key, "release").set()
    wait_until(lambda: first.in_flight() == 0, what="the first handler to return")
    assert [o["call"] for o in engine.observed(key)] == [2, 1]
    assert ledger_rows(db, run_id) == [(run_id, "s", "call2", os.getpid())]
    row = step_row(db, run_id)
    assert (row["state"], row["lease_owner"], row["lease_generation"]) == (
        "completed",
        "second",
        2,
    )
    assert (row["attempt"], row["reclaims"], row["output"]) == (1, 1, {"call": 2})
    assert first.get_run(run_id).output == {"s": {"call": 2}}


def test_handler_raising_after_business_write_leaves_no_row(make_client, db, schema) -> None:
    create_ledger(db)
    client = make_client(workers=1)
    client.start()
    run_id = client.submit(step_flow(f"{ENGINE}:write_then_raise", name="once"), {"schema": schema})
    status = client.wait(run_id, timeout=10)
    assert status.state == "failed"
    assert status.error_kind == "step_discarded"
    assert "ValueError: after business write" in (status.error or "")
    assert ledger_rows(db, run_id) == []
    row = step_row(db, run_id)
    assert (row["state"], row["error_kind"], row["attempt"]) == ("discarded", "handler_error", 1)
    assert row["error"] == "ValueError: after business write"
    assert len(row["errors"]) == 1
    assert "after business write" in row["errors"][0]["traceback"]

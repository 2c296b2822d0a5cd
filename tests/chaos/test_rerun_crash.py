"""A SIGKILL during a rerun: the rerun's downstream step writes its business
row through ``ctx.completion_tx()`` in a real worker process that is killed before the
commit; another worker reclaims the step after its lease expires. The new run ends with
exactly one row for that step, the reused upstream step wrote nothing for the new run,
and the original run's rows are untouched: nothing lost, nothing doubled."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers.procs import WorkerProcess, wait_until
from helpers.rows import create_ledger, ledger_rows, step_row

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text

FLOW = load_flow_text(
    """
name: rerun-crash
nodes:
  a:
    call: cyclone_test_handlers.engine:ledger
    input: {schema: "${{ run.input.schema }}"}
  b:
    call: cyclone_test_handlers.engine:crash_once
    needs: [a]
    input: {schema: "${{ run.input.schema }}", marker: "${{ run.input.marker }}", sleep: 60}
"""
)


def test_sigkill_during_a_rerun_loses_nothing_and_doubles_nothing(
    make_client: Callable[..., Client], db: Any, schema: str, database_url: str, tmp_path: Path
) -> None:
    create_ledger(db)
    marker = tmp_path / "written"
    marker.write_text("the original run does not crash")
    first = make_client(workers=1, lease_ttl=1.0)
    first.start()
    original = first.submit(FLOW, {"schema": schema, "marker": str(marker)})
    assert first.wait(original, timeout=15).state == "completed"
    first.shutdown()
    original_rows = ledger_rows(db, original)
    assert [r[1] for r in original_rows] == ["a", "b"]

    marker.unlink()  # the rerun's b crashes once
    submitter = make_client()
    new_id = submitter.rerun(original, "b")
    victim = WorkerProcess(database_url, schema, tmp_path / "victim.log", lease_ttl="1s")
    try:
        wait_until(marker.exists, timeout=20, what="the rerun's b to write its business row")
        row = step_row(db, new_id, "b")
        assert row["state"] == "running"
        assert row["lease_owner"].split("/")[1] == str(victim.pid)
        assert ledger_rows(db, new_id) == []  # written, not committed
    finally:
        victim.kill()

    rescuer = make_client(workers=1, lease_ttl=1.0)
    rescuer.start()
    status = rescuer.wait(new_id, timeout=20)
    assert status.state == "completed", (status, rescuer.list_steps(new_id), victim.log())
    assert ledger_rows(db, new_id) == [(new_id, "b", f"pid{os.getpid()}", os.getpid())]
    assert ledger_rows(db, original) == original_rows
    b = step_row(db, new_id, "b")
    assert (b["state"], b["attempt"], b["reclaims"]) == ("completed", 1, 1)
    a = step_row(db, new_id, "a")
    assert (a["state"], a["reused_from"]) == ("completed", step_row(db, original, "a")["id"])

"""Failure propagation and worker security (Engine Design: Failure Propagation; worker
allow-lists)."""

from __future__ import annotations

import os
import sys
import uuid

from cyclone_test_handlers import engine
from helpers.procs import WorkerProcess, wait_until
from helpers.rows import create_ledger, ledger_rows, step_rows

from cyclone_flow.flowfile import load_flow_text

FAIL_FAST = """
name: fail_fast
nodes:
  slow:
    call: cyclone_test_handlers.engine:until_cancelled
  bad:
    call: cyclone_test_handlers.engine:fail_after_entered
"""

BRANCH = """
name: branch
nodes:
  a:
    call: cyclone_test_handlers.basic:boom
  b:
    call: cyclone_test_handlers.basic:echo
    needs: [a]
    on_dep_failure: cancel_branch
  c:
    call: cyclone_test_handlers.basic:echo
"""

FORBIDDEN = """
name: forbidden
import_wait: 1s
nodes:
  x:
    call: cyclone_test_handlers.engine_forbidden:handler
"""

ALLOWED = """
name: allowed
nodes:
  x:
    call: cyclone_test_handlers.engine:sleepy
"""


def test_fail_run_cancels_running_sibling_and_ignores_its_completion(
    make_client, db, schema
) -> None:
    create_ledger(db)
    key = uuid.uuid4().hex
    client = make_client(workers=2, lease_ttl=1.0)
    client.start()
    run_id = client.submit(load_flow_text(FAIL_FAST), {"schema": schema, "key": key})
    status = client.wait(run_id, timeout=10)
    assert (status.state, status.error_kind) == ("failed", "step_discarded")
    assert "sibling failure" in (status.error or "")
    wait_until(lambda: engine.observed(key), timeout=5, what="the sibling to see the cancel")
    assert engine.observed(key) == [{"call": 1, "cancelled": True}]
    wait_until(lambda: client.in_flight() == 0, what="the sibling to return")

    steps = step_rows(db, run_id)
    assert (steps["bad"]["state"], steps["bad"]["error_kind"]) == ("discarded", "handler_error")
    slow = steps["slow"]
    assert (slow["state"], slow["error_kind"], slow["output"]) == ("cancelled", "cancelled", None)
    assert ledger_rows(db, run_id) == []  # the late completion and its write rolled back
    assert client.get_run(run_id).state == "failed"


def test_cancel_branch_contains_discard_and_run_completes(make_client, db) -> None:
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(load_flow_text(BRANCH), {"v": 1})
    status = client.wait(run_id, timeout=10)
    assert status.state == "completed", (status, client.list_steps(run_id))
    assert (status.error, status.error_kind) == (None, None)
    assert status.output == {"c": {"v": 1}}
    steps = step_rows(db, run_id)
    assert (steps["a"]["state"], steps["a"]["error_kind"]) == ("discarded", "handler_error")
    assert (steps["b"]["state"], steps["b"]["error_kind"]) == ("cancelled", "cancelled")
    assert steps["b"]["started_at"] is None  # never ran
    assert steps["c"]["state"] == "completed"


def test_allow_list_never_imports_module_outside_it(make_client, db) -> None:
    sys.modules.pop("cyclone_test_handlers.engine_forbidden", None)
    os.environ.pop("CYCLONE_TEST_FORBIDDEN_IMPORTED", None)
    client = make_client(workers=1, allow_modules=["cyclone_test_handlers.engine"])
    client.start()
    ok = client.submit(load_flow_text(ALLOWED), {"seconds": 0})
    assert client.wait(ok, timeout=10).state == "completed"  # the allowed prefix works

    run_id = client.submit(load_flow_text(FORBIDDEN), {})
    status = client.wait(run_id, timeout=10)
    assert status.state == "failed"
    step = step_rows(db, run_id)["x"]
    assert (step["state"], step["error_kind"]) == ("discarded", "import_error")
    assert "not allowed" in step["error"] and "was not imported" in step["error"]
    # given back (no attempt charged) until its import_wait passed, then discarded once
    assert "import_wait passed" in step["error"] and step["attempt"] == 1
    assert len(step["errors"]) == 1
    assert "cyclone_test_handlers.engine_forbidden" not in sys.modules
    assert "CYCLONE_TEST_FORBIDDEN_IMPORTED" not in os.environ


def test_worker_process_allow_list_never_imports_module_outside_it(
    make_client, db, schema, database_url, tmp_path
) -> None:
    marker = tmp_path / "imported"
    submitter = make_client()
    run_id = submitter.submit(load_flow_text(FORBIDDEN), {})
    worker = WorkerProcess(
        database_url,
        schema,
        tmp_path / "worker.log",
        allow=["cyclone_test_handlers.engine"],
        env={"CYCLONE_TEST_FORBIDDEN_MARKER": str(marker)},
    )
    try:
        status = submitter.wait(run_id, timeout=20)
    finally:
        worker.terminate()
    assert status.state == "failed", worker.log()
    step = step_rows(db, run_id)["x"]
    assert (step["state"], step["error_kind"]) == ("discarded", "import_error")
    assert not marker.exists(), "the worker imported a module outside its allow-list"


EXIT_ONCE = """
name: exit_once
nodes:
  s:
    call: cyclone_test_handlers.engine:exit_once
"""

ECHO = """
name: echo
nodes:
  s:
    call: cyclone_test_handlers.basic:echo
"""


def test_handler_raising_system_exit_fails_attempt_and_worker_survives(make_client, db) -> None:
    key = uuid.uuid4().hex
    client = make_client(workers=1, lease_ttl=1.0)
    client.start()
    run_id = client.submit(load_flow_text(EXIT_ONCE), {"key": key})
    status = client.wait(run_id, timeout=3)
    steps = step_rows(db, run_id)
    assert (status.state, steps["s"]["state"], steps["s"]["error_kind"]) == (
        "failed",
        "discarded",
        "handler_error",
    ), steps["s"]
    assert "SystemExit" in steps["s"]["error"]
    # the single worker thread is still alive and executes the next run
    ok = client.submit(load_flow_text(ECHO), {"v": 1})
    assert client.wait(ok, timeout=3).state == "completed"

"""Leases, heartbeats, timeouts and graceful shutdown (Engine Design: Leases and
Heartbeats)."""

from __future__ import annotations

import os
import uuid
from typing import Any

from cyclone_test_handlers import engine
from helpers.engine import sweep_once
from helpers.flows import step_flow
from helpers.procs import wait_until
from helpers.rows import create_ledger, ledger_rows, step_row

ENGINE = "cyclone_test_handlers.engine"


def test_heartbeat_keeps_long_handler_lease_beyond_ttl(make_client, db) -> None:
    ttl = 1.0
    client = make_client(workers=1, lease_ttl=ttl)
    other = make_client(workers=1, lease_ttl=ttl)  # a second live client sweeping too
    client.start()
    run_id = client.submit(step_flow(f"{ENGINE}:sleepy", name="leases"), {"seconds": 3 * ttl})
    other.start()

    def past_ttl() -> dict[str, Any] | None:
        row = step_row(db, run_id)
        if row["started_at"] is None:
            return None
        if row["state"] != "running":
            return row  # finished (or lost) before the check: the assertions below fail
        elapsed = (row["db_now"] - row["started_at"]).total_seconds()
        return row if elapsed > 1.5 * ttl else None

    row = wait_until(past_ttl, timeout=10, what="the handler to outlive its TTL")
    assert row["state"] == "running"
    assert row["lease_expiry"] > row["db_now"], "the heartbeat did not renew the lease"
    assert row["heartbeat_at"] > row["started_at"]
    assert sweep_once(client)["rescued"] == 0
    assert sweep_once(other)["rescued"] == 0

    status = client.wait(run_id, timeout=10)
    assert status.state == "completed"
    assert status.output == {"s": {"cancelled": False}}
    row = step_row(db, run_id)
    assert (row["reclaims"], row["lease_generation"], row["attempt"]) == (0, 1, 1)


def test_timeout_fails_step_with_fresh_lease_and_cancels_handler(make_client, db, schema) -> None:
    """A handler that ignores cancellation keeps running past its timeout: the sweep fails
    the attempt although the lease is fresh; the handler is told, and its late completion
    (and its ledger row) is ignored."""
    create_ledger(db)
    key = uuid.uuid4().hex
    # a lease far longer than the timeout: it is still fresh however late the poll below
    # sees the timeout pass (a loaded machine), so the sweep finds a timeout, not a lapse
    client = make_client(workers=1, lease_ttl=30.0, sweep_interval=60.0)
    client.start()
    run_id = client.submit(
        step_flow(f"{ENGINE}:gate", name="leases", timeout="1s"), {"schema": schema, "key": key}
    )
    assert engine.event(key, "entered").wait(10)

    def timed_out() -> dict[str, Any] | None:
        row = step_row(db, run_id)
        return row if row["started_at"] + row["timeout"] <= row["db_now"] else None

    row = wait_until(timed_out, timeout=10, what="started_at + timeout to pass")
    assert row["state"] == "running"
    assert row["lease_expiry"] > row["db_now"], "the lease should still be fresh"
    assert sweep_once(client) == {"timed_out": 1, "reclaim_limit": 0, "rescued": 0}

    row = step_row(db, run_id)
    assert (row["state"], row["error_kind"], row["reclaims"]) == ("discarded", "timeout", 0)
    status = client.get_run(run_id)
    assert (status.state, status.error_kind) == ("failed", "step_discarded")
    engine.event(key, "release").set()
    wait_until(lambda: engine.observed(key), timeout=5, what="the handler to return")
    assert engine.observed(key) == [{"call": 1, "released": True, "cancelled": True}]
    wait_until(lambda: client.in_flight() == 0, what="the handler to finish")
    assert step_row(db, run_id)["state"] == "discarded"  # the late completion was ignored
    assert ledger_rows(db, run_id) == []


def test_graceful_shutdown_releases_lease_for_immediate_claim(make_client, db, schema) -> None:
    create_ledger(db)
    key = uuid.uuid4().hex
    ttl = 30.0  # another client could otherwise take the step only after this TTL
    first = make_client(workers=1, lease_ttl=ttl, client_id="first")
    first.start()
    run_id = first.submit(
        step_flow(f"{ENGINE}:gate", name="leases"), {"schema": schema, "key": key}
    )
    assert engine.event(key, "entered").wait(10)
    first.shutdown(timeout=0.1)  # the handler is still blocked in the gate

    row = step_row(db, run_id)
    assert (row["state"], row["lease_owner"], row["lease_expiry"]) == ("available", None, None)
    assert (row["reclaims"], row["attempt"]) == (0, 1)

    second = make_client(workers=1, lease_ttl=ttl, client_id="second")
    second.start()
    status = second.wait(run_id, timeout=5)
    assert status.state == "completed", second.list_steps(run_id)

    engine.event(key, "release").set()
    wait_until(lambda: first.in_flight() == 0, what="the first handler to return")
    assert ledger_rows(db, run_id) == [(run_id, "s", "call2", os.getpid())]
    row = step_row(db, run_id)
    assert (row["state"], row["lease_owner"], row["output"]) == (
        "completed",
        "second",
        {"call": 2},
    )
    assert (row["lease_generation"], row["reclaims"], row["attempt"]) == (2, 0, 1)

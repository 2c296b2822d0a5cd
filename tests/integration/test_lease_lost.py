"""``ctx.lease_lost``: the heartbeat sets it when it finds the attempt's
lease gone, so a long handler of a worker that stalled past its lease (SIGSTOP, a long
GC pause) can notice that the step was reclaimed and may run elsewhere, and stop."""

from __future__ import annotations

import time
import uuid
from typing import Any

from cyclone_test_handlers import engine
from helpers.flows import step_flow
from helpers.procs import wait_until
from helpers.rows import step_row

CALL = "cyclone_test_handlers.leases:until_lease_lost"
TTL_S = 0.9  # a beat every 0.3 s


def test_lease_lost_is_set_within_a_few_beats_after_the_lease_is_taken_away(
    make_client: Any, db: Any
) -> None:
    key = uuid.uuid4().hex
    # no sweep of its own during the test: only the lease taken away below ends the lease
    client = make_client(workers=1, lease_ttl=TTL_S, sweep_interval=60.0)
    client.start()
    run_id = client.submit(step_flow(CALL, name="lease_lost"), {"key": key, "seconds": 30})
    assert engine.event(key, "entered").wait(10), "the handler did not start"
    # beats that renew the lease do not set it
    first = step_row(db, run_id)["heartbeat_at"]
    wait_until(
        lambda: step_row(db, run_id)["heartbeat_at"] > first,
        timeout=5,
        what="a beat to renew the lease",
    )
    assert not engine.event(key, "lost").is_set()

    # the step reclaimed elsewhere: its lease generation moves on, as a reclaim's does
    db.execute(
        "UPDATE cyclone_steps SET lease_generation = lease_generation + 1"
        " WHERE run_id = %s AND state = 'running'",
        (run_id,),
    )
    taken = time.monotonic()
    assert engine.event(key, "lost").wait(10 * TTL_S / 3), "ctx.lease_lost was never set"
    seen = time.monotonic() - taken
    print(f"ctx.lease_lost seen {seen:.2f}s after the lease was taken (a beat every 0.3 s)")
    assert seen < 4 * TTL_S / 3 + 0.5, f"seen after {seen:.2f}s: more than a few beats"
    assert engine.observed(key) == [{"cancelled": True}]  # told to stop as well


def test_lease_lost_is_not_set_by_a_cancel_of_the_shutdown(make_client: Any, db: Any) -> None:
    """A shutdown tells the handler to stop (ctx.cancelled()), but its lease was not lost:
    lease_lost stays clear (the handler stops as for any cancel)."""
    key = uuid.uuid4().hex
    client = make_client(workers=1, lease_ttl=TTL_S, sweep_interval=60.0)
    client.start()
    client.submit(step_flow(f"{CALL}", name="lease_kept"), {"key": key, "seconds": 2})
    assert engine.event(key, "entered").wait(10), "the handler did not start"
    client.shutdown(timeout=0)
    assert not engine.event(key, "lost").is_set()

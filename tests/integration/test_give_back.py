"""The give-back of a step its worker cannot import, on the engine's own
statements: a guarded running -> available that charges no attempt and no reclaim, keeps
the first give-back's instant, pushes scheduled_at back; refused when stale and once the
node's import_wait has passed (then the step is discarded with import_error); and the
claim that leaves the calls a worker gave back to other workers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from helpers.engine import database

from cyclone_flow import Client
from cyclone_flow.engine import claim as engine_claim
from cyclone_flow.engine.fail import give_back_step_alone
from cyclone_flow.flowfile import load_flow_text

TWO = """
name: two_calls
import_wait: 1h
nodes:
  a: {call: 'cyclone_test_handlers.basic:echo'}
  b: {call: 'cyclone_test_handlers.queueing:noop', import_wait: 1s}
"""


def _claim(client: Client, owner: str, skip: list[str] | None = None) -> list[Any]:
    with database(client).autocommit_session() as s:
        return engine_claim.claim(s, owner, 30.0, ["default"], 10, skip_calls=skip or [])


def _give_back(client: Client, step: Any, owner: str = "w1", delay_s: float = 0.5) -> Any:
    return give_back_step_alone(
        database(client),
        step_id=step.id,
        generation=step.lease_generation,
        owner=owner,
        reason=f"no live worker can import {step.call}: worker {owner}: boom",
        delay_s=delay_s,
    )


def test_a_give_back_charges_nothing_and_keeps_the_first_instant(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    run_id = client.submit(load_flow_text(TWO), {})
    claimed = {s.node: s for s in _claim(client, "w1")}
    a = claimed["a"]
    assert _give_back(client, a, owner="w2") is None  # not its lease
    assert _give_back(client, a) == "default"
    assert _give_back(client, a) is None  # stale: given back already
    row = db.execute(
        "SELECT state, attempt, reclaims, lease_owner, lease_expiry, import_wait_since,"
        " import_wait_reason, scheduled_at > now() + interval '0.3 s', errors"
        " FROM cyclone_steps WHERE run_id = %s AND node = 'a'",
        (run_id,),
    ).fetchone()
    state, attempt, reclaims, owner, expiry, since, reason, later, errors = row
    assert (state, attempt, reclaims, owner, expiry, errors) == ("available", 1, 0, None, None, [])
    assert later and reason.startswith("no live worker can import cyclone_test_handlers.basic")
    db.execute("UPDATE cyclone_steps SET scheduled_at = now() WHERE run_id = %s", (run_id,))
    (again,) = [s for s in _claim(client, "w1") if s.node == "a"]
    assert again.attempt == 1 and _give_back(client, again) == "default"
    (first,) = db.execute(
        "SELECT import_wait_since FROM cyclone_steps WHERE run_id = %s AND node = 'a'", (run_id,)
    ).fetchone()
    assert first == since  # measured from the first give-back


def test_past_import_wait_the_give_back_is_refused(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    run_id = client.submit(load_flow_text(TWO), {})
    b = next(s for s in _claim(client, "w1") if s.node == "b")
    assert _give_back(client, b, delay_s=0) == "default"
    # the node's import_wait (1s) has passed since the first give-back
    db.execute(
        "UPDATE cyclone_steps SET import_wait_since = now() - interval '2 s'"
        " WHERE run_id = %s AND node = 'b'",
        (run_id,),
    )
    b = next(s for s in _claim(client, "w1") if s.node == "b")
    assert _give_back(client, b) is None
    (state,) = db.execute(
        "SELECT state FROM cyclone_steps WHERE run_id = %s AND node = 'b'", (run_id,)
    ).fetchone()
    assert state == "running"  # left for the caller to discard under the same lease


def test_the_claim_leaves_the_calls_a_worker_gave_back(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    client.submit(load_flow_text(TWO), {})
    skip = ["cyclone_test_handlers.basic:echo"]
    assert [s.node for s in _claim(client, "w1", skip)] == ["b"]
    assert [s.node for s in _claim(client, "w2")] == ["a"]

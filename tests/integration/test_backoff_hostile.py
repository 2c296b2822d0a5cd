"""A failed attempt is always recorded, whatever backoff the step carries: an
``initial: 1.0e-320`` must not overflow float8 in ``step_fail_if_leased`` (the attempt
would never be written and the step would be reclaimed and re-run for ever).

Lint and the job options now refuse such values (tests/unit: E007, SubmitOptionError); these
tests store them anyway (a definition built without lint, or written by an older version)
and check that the engine copes: the arithmetic is clamped and done in log space, and a
stored backoff it cannot compute at all still records the attempt, without backoff."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from helpers.engine import claim, database, fail_step, sweep_once

from cyclone_flow import Client
from cyclone_flow.flowfile.build import build_flow
from cyclone_flow.flowfile.model import Flow


def _flow(backoff: dict[str, Any], max_attempts: int = 3, queue: str = "default") -> Flow:
    """A one-node flow built without lint, so that any backoff reaches the database."""
    node = {
        "call": "cyclone_test_handlers.basic:boom",
        "queue": queue,
        "retry": {"max_attempts": max_attempts, "backoff": backoff},
    }
    return build_flow({"name": "hostile_backoff", "nodes": {"a": node}})


def _fail_once(client: Client, db: Any, stored_backoff: str, attempt: int) -> float:
    """Claim a fresh step, give it ``stored_backoff`` (JSON text, as the plan stores it)
    and ``attempt``, fail it through the real ``step_fail_if_leased``; return the delay in
    seconds (``scheduled_at`` minus the instant recorded with the attempt)."""
    run_id = client.submit(_flow({"initial": 1}), None)
    (step,) = claim(client, client.config.client_id, 30, ["default"], 1)
    (generation,) = db.execute(
        "UPDATE cyclone_steps SET backoff = %s::jsonb, attempt = %s, max_attempts = %s"
        " WHERE id = %s RETURNING lease_generation",
        (stored_backoff, attempt, attempt + 1, step.id),
    ).fetchone()
    with database(client).pool.connection() as conn, conn.transaction():
        outcome = fail_step(
            client,
            conn,
            step_id=step.id,
            run_id=run_id,
            generation=generation,
            owner=None,
            error="x",
            error_kind="handler_error",  # type: ignore[arg-type]
        )
    assert outcome is not None and outcome.step_state == "available"
    delay, new_attempt, errors = db.execute(
        "SELECT extract(epoch FROM scheduled_at - (errors -> -1 ->> 'at')::timestamptz),"
        " attempt, jsonb_array_length(errors) FROM cyclone_steps WHERE id = %s",
        (step.id,),
    ).fetchone()
    assert (new_attempt, errors) == (attempt + 1, 1)
    return float(delay)


DAY = 86400.0


@pytest.mark.parametrize(
    ("stored", "attempt", "low", "high"),
    [
        # the finding: a denormal initial (max / initial overflowed float8): waits 1 ms
        ('{"initial_s": 1e-320, "max_s": 300, "jitter": 0}', 1, 0.001, 0.001),
        ('{"initial_s": 5e-324, "max_s": 31622400, "jitter": 0}', 1, 0.001, 0.001),
        # the smallest initial with the largest max and multiplier: exp() cannot overflow
        (
            '{"initial_s": 5e-324, "max_s": 31622400, "multiplier": 1e308, "jitter": 0}',
            1000,
            366 * DAY,
            366 * DAY,
        ),
        (
            '{"initial_s": 1, "max_s": 300, "multiplier": 1.7976931348623157e308, "jitter": 1}',
            2**30,
            0,
            300,
        ),
        # a denormal max
        ('{"initial_s": 1, "max_s": 1e-320, "jitter": 0}', 5, 0.001, 0.001),
        # numbers no float8 holds, which jsonb stores (an older version, or by hand)
        (
            '{"initial_s": 1e-400, "max_s": 1e400, "multiplier": 1e400, "jitter": 1e400}',
            3,
            0,
            366 * DAY,
        ),
        (
            '{"initial_s": 1e400, "max_s": 1e400, "multiplier": 1, "jitter": 0}',
            1,
            366 * DAY,
            366 * DAY,
        ),
        ('{"initial_s": 2, "max_s": 60, "multiplier": 2, "jitter": -5}', 3, 8, 8),
    ],
)
def test_extreme_stored_backoff_is_computed(
    make_client: Callable[..., Client], db: Any, stored: str, attempt: int, low: float, high: float
) -> None:
    delay = _fail_once(make_client(), db, stored, attempt)
    assert low - 1e-6 <= delay <= high + 1e-6


def test_tiny_backoff_fails_records_and_discards_end_to_end(
    make_client: Callable[..., Client],
) -> None:
    """The finding as reported: 3 attempts with ``initial: 1.0e-320`` are each recorded
    and the step is discarded, never reclaimed."""
    client = make_client(workers=1, lease_ttl=1.0)
    run_id = client.submit(_flow({"initial": 1.0e-320, "max": 300}), None)
    client.start()
    status = client.wait(run_id, timeout=20)
    assert status.state == "failed"
    (step,) = client.list_steps(run_id)
    assert (step.state, step.attempt, step.reclaims) == ("discarded", 3, 0)
    assert [e["attempt"] for e in step.errors] == [1, 2, 3]
    assert all(e["error"] == "RuntimeError: boom" for e in step.errors)


def _corrupt_backoff(db: Any, run_id: str) -> None:
    db.execute(
        'UPDATE cyclone_steps SET backoff = \'{"initial_s": "soon"}\'::jsonb WHERE run_id = %s',
        (run_id,),
    )


def test_uncomputable_backoff_still_records_every_attempt(
    make_client: Callable[..., Client], db: Any
) -> None:
    """A stored backoff that is not numbers makes step_fail_if_leased raise a data error:
    the worker records the attempt again in a fresh transaction, without backoff, so the
    step runs its 3 attempts and is discarded instead of looping on its lease."""
    client = make_client(workers=1, lease_ttl=1.0)
    run_id = client.submit(_flow({"initial": 1, "max": 300}), None)
    _corrupt_backoff(db, run_id)
    client.start()
    status = client.wait(run_id, timeout=20)
    assert status.state == "failed"
    (step,) = client.list_steps(run_id)
    assert (step.state, step.attempt, step.reclaims) == ("discarded", 3, 0)
    assert [e["attempt"] for e in step.errors] == [1, 2, 3]
    for entry in step.errors:
        assert entry["error"].startswith("RuntimeError: boom [no retry backoff: it could not")
        assert "soon" in entry["error"]


def test_sweep_records_a_timeout_whose_backoff_cannot_be_computed(
    make_client: Callable[..., Client], db: Any
) -> None:
    """The recovery sweep's timeout failure takes the same fallback."""
    client = make_client(workers=1, sweep_interval=60.0)
    run_id = client.submit(_flow({"initial": 1}, queue="idle"), None)
    (step,) = claim(client, client.config.client_id, 30, ["idle"], 1)
    _corrupt_backoff(db, run_id)
    db.execute(
        "UPDATE cyclone_steps SET timeout = interval '1 second',"
        " started_at = now() - interval '1 minute' WHERE id = %s",
        (step.id,),
    )
    client.start()  # its workers serve the default queue only: the step stays put
    assert client.runtime is not None
    assert sweep_once(client)["timed_out"] == 1
    row = db.execute(
        "SELECT state, attempt, error_kind, error, jsonb_array_length(errors), "
        "scheduled_at <= now() FROM cyclone_steps WHERE id = %s",
        (step.id,),
    ).fetchone()
    assert row[:3] == ("available", 2, "timeout")
    assert "no retry backoff" in row[3] and row[4] == 1 and row[5] is True

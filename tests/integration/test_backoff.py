"""Retry backoff computed by the database: the exact delay of each
failed attempt, its bounds (no overflow, jitter never past ``max``) and the edge values the
flow schema accepts (``initial: 0``, ``max: 0``, ``initial`` above ``max``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from helpers.engine import claim, database, fail_step
from helpers.flows import step_flow

from cyclone_flow import Client

BOOM = "cyclone_test_handlers.basic:boom"


def _delays(client: Client, db: Any, backoff: str, attempt: int, samples: int = 1) -> list[float]:
    """Fail attempt ``attempt`` of a fresh step ``samples`` times through the real
    ``step_fail_if_leased`` statement; return each exact delay in seconds
    (``scheduled_at`` minus the ``statement_timestamp()`` recorded with the attempt)."""
    run_id = client.submit(
        step_flow(
            BOOM, name="backoff", node="a", retry=f"{{max_attempts: 1000, backoff: {backoff}}}"
        ),
        None,
    )
    (step,) = claim(client, client.config.client_id, 30, ["default"], 1)
    out = []
    for _ in range(samples):
        row = db.execute(
            "UPDATE cyclone_steps SET state = 'running', attempt = %s, max_attempts = %s,"
            " finished_at = NULL, lease_owner = 'test', lease_expiry = now() + interval '1m',"
            " lease_generation = lease_generation + 1 WHERE id = %s RETURNING lease_generation",
            (attempt, attempt + 1, step.id),
        ).fetchone()
        with database(client).pool.connection() as conn, conn.transaction():
            outcome = fail_step(
                client,
                conn,
                step_id=step.id,
                run_id=run_id,
                generation=row[0],
                owner=None,
                error="x",
                error_kind="handler_error",  # type: ignore[arg-type]
            )
        assert outcome is not None and outcome.step_state == "available"
        delay, new_attempt = db.execute(
            "SELECT extract(epoch FROM scheduled_at - (errors -> -1 ->> 'at')::timestamptz),"
            " attempt FROM cyclone_steps WHERE id = %s",
            (step.id,),
        ).fetchone()
        assert new_attempt == attempt + 1
        out.append(float(delay))
    return out


@pytest.mark.parametrize(
    ("backoff", "attempt", "expected"),
    [
        ("{initial: 2s, max: 1h, multiplier: 3, jitter: 0}", 1, 2.0),
        ("{initial: 2s, max: 1h, multiplier: 3, jitter: 0}", 3, 18.0),
        ("{initial: 2s, max: 1h, multiplier: 3, jitter: 0}", 8, 3600.0),  # 4374 s capped
        ("{initial: 1s, max: 1h, multiplier: 2, jitter: 0}", 10_000, 3600.0),
        ("{initial: 1s, max: 366d, multiplier: 1000, jitter: 0}", 10_000, 366 * 86400.0),
        ("{initial: 5s, max: 5s, multiplier: 2, jitter: 0}", 10_000, 5.0),
        ("{initial: 10s, max: 1h, multiplier: 1, jitter: 0}", 10_000, 10.0),
        ("{initial: 10m, jitter: 0}", 1, 300.0),  # initial above the default max: max
        ("{initial: 0, max: 1h, jitter: 1}", 10_000, 0.0),  # no wait, not a division by 0
        ("{max: 0, jitter: 1}", 3, 0.0),  # no wait, not ln(0)
        ("{initial: 0, max: 0}", 1, 0.0),
    ],
)
def test_exact_delay(
    make_client: Callable[..., Client], db: Any, backoff: str, attempt: int, expected: float
) -> None:
    (delay,) = _delays(make_client(), db, backoff, attempt)
    assert delay == pytest.approx(expected, abs=1e-5)


def test_jitter_stays_within_its_band_and_never_exceeds_max(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    # attempt 10,000 with full jitter: min(max, max * (1 +/- 1)) lies in [0, max]
    capped = _delays(client, db, "{initial: 1s, max: 1m, jitter: 1}", 10_000, samples=40)
    assert all(0 <= d <= 60.0 + 1e-6 for d in capped), capped
    assert min(capped) < 60.0  # the jitter is applied, not dropped
    # below the cap: initial * multiplier^(attempt-1) * (1 +/- jitter)
    banded = _delays(client, db, "{initial: 1s, max: 1h, multiplier: 2, jitter: 0.25}", 4, 40)
    assert all(8 * 0.75 - 1e-6 <= d <= 8 * 1.25 + 1e-6 for d in banded), banded
    assert len({round(d, 6) for d in banded}) > 1


def test_defaults_wait_about_one_second_then_double(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    first = _delays(client, db, "{}", 1, samples=10)
    assert all(0.9 - 1e-6 <= d <= 1.1 + 1e-6 for d in first), first
    third = _delays(client, db, "{}", 3, samples=10)
    assert all(3.6 - 1e-6 <= d <= 4.4 + 1e-6 for d in third), third


def test_zero_initial_backoff_retries_at_once_end_to_end(
    make_client: Callable[..., Client],
) -> None:
    """``backoff: {initial: 0}`` passes lint; its failed attempts must be recorded and
    retried at once (no division by zero leaving the step to its lease, to be reclaimed
    and failed again forever)."""
    client = make_client(lease_ttl=1.0)
    run_id = client.submit(
        step_flow(BOOM, name="backoff", node="a", retry="{max_attempts: 3, backoff: {initial: 0}}"),
        None,
    )
    client.start()
    status = client.wait(run_id, timeout=15)
    assert status.state == "failed"
    (step,) = client.list_steps(run_id)
    assert (step.state, step.attempt, step.reclaims) == ("discarded", 3, 0)
    assert [e["attempt"] for e in step.errors] == [1, 2, 3]

"""What counts as "the database is out of reach" (``database_lost``) and how a waiter
rides it out (``ride_out``): retried with a backoff until the deadline or the grace
period, any other error at once."""

from __future__ import annotations

import time

import psycopg
import psycopg_pool
import pytest
from psycopg import errors

from cyclone_flow.db.errors import Outage, database_lost, ride_out


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.OperationalError("server closed the connection unexpectedly"),  # no SQLSTATE
        errors.AdminShutdown("terminating connection due to administrator command"),  # 57P01
        errors.CannotConnectNow("the database system is starting up"),  # 57P03
        errors.ConnectionFailure("connection failure"),  # 08006
        psycopg.InterfaceError("the connection is closed"),
        psycopg_pool.PoolTimeout("couldn't get a connection after 30.00 sec"),
    ],
)
def test_the_database_is_lost(exc: Exception) -> None:
    assert database_lost(exc)


@pytest.mark.parametrize(
    "exc",
    [
        errors.UndefinedTable("relation does not exist"),
        errors.SerializationFailure("could not serialize access"),
        errors.QueryCanceled("canceling statement due to statement timeout"),  # 57014
        ValueError("not a database error"),
    ],
)
def test_a_statement_failed(exc: Exception) -> None:
    assert not database_lost(exc)


def test_ride_out_retries_until_the_database_is_back() -> None:
    calls: list[str] = []
    lost: list[Exception] = []

    def read() -> str:
        calls.append("call")
        if len(calls) < 4:
            raise errors.AdminShutdown("terminating connection")
        return "run"

    assert ride_out(read, grace=10, on_lost=lost.append) == "run"
    assert len(calls) == 4
    assert len(lost) == 1, "one report per outage, not one per retry"


def test_ride_out_gives_up_at_the_deadline_with_the_last_error() -> None:
    started = time.monotonic()

    def read() -> str:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    with pytest.raises(psycopg.OperationalError, match="closed the connection"):
        ride_out(read, deadline=started + 0.3, grace=60)
    assert 0.25 < time.monotonic() - started < 2


def test_ride_out_gives_up_after_the_grace_without_a_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(psycopg_pool.PoolTimeout):
        ride_out(lambda: (_ for _ in ()).throw(psycopg_pool.PoolTimeout("no conn")), grace=0.3)
    assert time.monotonic() - started < 2


def test_ride_out_lets_any_other_error_through_at_once() -> None:
    calls = 0

    def read() -> str:
        nonlocal calls
        calls += 1
        raise errors.UndefinedTable("relation does not exist")

    with pytest.raises(errors.UndefinedTable):
        ride_out(read, grace=60)
    assert calls == 1


class _Clock:
    """Monotonic seconds that move only when told (a call's duration) or slept."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _lost_after(clock: _Clock, seconds: float) -> psycopg.OperationalError:
    clock.now += seconds  # the look waited this long (e.g. for a pool connection)
    return psycopg.OperationalError("server closed the connection unexpectedly")


def test_one_outage_spans_every_call_ridden_through_it() -> None:
    """A follower's looks (status, then steps, then status...) share one spell: it gives
    up ``grace`` seconds after the first failing look began, not ``grace`` after each
    call first failed (which let `cyclone-flow run` wait about 150 s, not 60)."""
    clock = _Clock()
    lost: list[Exception] = []
    outage = Outage(grace=60, on_lost=lost.append, clock=clock, sleep=clock.sleep)
    started = clock.now

    def look() -> str:
        raise _lost_after(clock, 5)

    for _ in range(100):  # calls in turn, as a follower makes them
        try:
            outage.ride(look)
        except psycopg.OperationalError:
            break
    assert 60 <= clock.now - started <= 65 + 1
    assert len(lost) == 1, "one report per spell, however many calls meet it"


def test_an_outage_counts_from_the_start_of_the_first_failing_call() -> None:
    clock = _Clock()
    outage = Outage(grace=60, clock=clock, sleep=clock.sleep)
    started = clock.now
    calls = 0

    def look() -> str:
        nonlocal calls
        calls += 1
        raise _lost_after(clock, 61)  # one look that waited the whole grace

    with pytest.raises(psycopg.OperationalError):
        outage.ride(look)
    assert calls == 1, "no retry past the grace"
    assert clock.now - started == 61


def test_a_call_that_works_ends_the_spell() -> None:
    clock = _Clock()
    outage = Outage(grace=10, clock=clock, sleep=clock.sleep)
    failures = iter([True, True, False, True, True, False])

    def look() -> str:
        if next(failures):
            raise _lost_after(clock, 4)
        return "run"

    assert outage.ride(look) == "run"  # 2 failures: 8 s + backoff < 10 s
    assert outage.since is None
    assert outage.ride(look) == "run", "a new spell gets the whole grace again"


def test_an_outage_gives_up_at_its_deadline_first() -> None:
    clock = _Clock()
    outage = Outage(grace=60, deadline=clock.now + 3, clock=clock, sleep=clock.sleep)
    with pytest.raises(psycopg.OperationalError):
        outage.ride(lambda: (_ for _ in ()).throw(_lost_after(clock, 1)))
    assert clock.now <= 1000 + 3 + 1

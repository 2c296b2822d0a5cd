"""What counts as "the database is out of reach" (``database_lost``) and how a waiter
rides it out (``ride_out``): retried with a backoff until the deadline or the grace
period, any other error at once."""

from __future__ import annotations

import time

import psycopg
import psycopg_pool
import pytest
from psycopg import errors

from cyclone_flow.db.errors import database_lost, ride_out


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

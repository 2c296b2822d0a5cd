"""What kind of database trouble an error is, and how the worker's threads report it:
the database lost is one warning line without traceback, counted per
``where`` (the metric ``cyclone_database_errors_total``); anything else is an ERROR with
its traceback; a serialization failure or a deadlock is tried again at once, boundedly."""

from __future__ import annotations

import logging

import psycopg
import pytest
from psycopg import errors
from psycopg_pool import PoolTimeout

from cyclone_flow.db.conn import CONFLICT_RETRIES, conflict, retry_conflicts
from cyclone_flow.db.errors import database_lost
from cyclone_flow.events import Reporter
from cyclone_flow.metrics import Metrics


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.OperationalError("consuming input failed: server closed the connection"),
        psycopg.InterfaceError("the connection is closed"),
        errors.AdminShutdown("terminating connection due to administrator command"),
        errors.CannotConnectNow("the database system is starting up"),
        errors.ConnectionFailure("connection failure"),
        PoolTimeout("couldn't get a connection after 30.00 sec"),
    ],
)
def test_the_database_lost(exc: Exception) -> None:
    assert database_lost(exc) and not conflict(exc)


@pytest.mark.parametrize(
    "exc",
    [
        errors.QueryCanceled("canceling statement due to statement timeout"),
        errors.SerializationFailure("could not serialize access"),
        errors.DeadlockDetected("deadlock detected"),
        errors.UniqueViolation("duplicate key"),
        ValueError("a bug"),
    ],
)
def test_not_the_database_lost(exc: Exception) -> None:
    assert not database_lost(exc)


def test_retry_conflicts_runs_again_at_once_a_bounded_number_of_times() -> None:
    calls: list[int] = []

    def deadlocks_twice() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise errors.DeadlockDetected("deadlock detected")
        return "done"

    assert retry_conflicts(deadlocks_twice) == "done" and len(calls) == 3
    calls.clear()

    def always() -> None:
        calls.append(1)
        raise errors.SerializationFailure("could not serialize access")

    with pytest.raises(errors.SerializationFailure):
        retry_conflicts(always)
    assert len(calls) == CONFLICT_RETRIES
    calls.clear()

    def other() -> None:
        calls.append(1)
        raise errors.UniqueViolation("duplicate key")

    with pytest.raises(errors.UniqueViolation):
        retry_conflicts(other)
    assert len(calls) == 1


def test_trouble_is_one_counted_warning_line_or_an_error_with_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    log = logging.getLogger("cyclone_test_trouble")
    reporter = Reporter(log, on_database_error=metrics.observe_database_error)
    with caplog.at_level(logging.INFO, logger="cyclone_test_trouble"):
        lost = errors.AdminShutdown("terminating connection due to administrator command\nmore")
        reporter.trouble("heartbeat", lost, "heartbeat failed for %d leases", 3)
        reporter.trouble("claim", psycopg.OperationalError("server closed"), "claim failed")
        reporter.trouble("claim", ValueError("a bug"), "claim failed")
    warning, second, error = caplog.records
    assert warning.levelno == logging.WARNING and warning.exc_info is None
    assert warning.getMessage() == (
        "heartbeat failed for 3 leases (database unreachable: AdminShutdown: terminating "
        "connection due to administrator command)"
    )
    assert second.levelno == logging.WARNING and second.exc_info is None
    assert error.levelno == logging.ERROR and error.exc_info is not None
    assert error.getMessage() == "claim failed"
    value = metrics.registry.get_sample_value
    assert value("cyclone_database_errors_total", {"where": "heartbeat"}) == 1
    assert value("cyclone_database_errors_total", {"where": "claim"}) == 1  # not the bug

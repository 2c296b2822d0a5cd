"""Telling "the database is out of reach" from every other database error, and riding
such an outage out (a Postgres restart, a failover, a pooler restarting).

:func:`database_lost` is the one test: the connection broke, not the statement. What
waits on the database for a user (``Client.wait``, ``submit --wait``, ``cyclone-flow run``)
retries such errors with :func:`ride_out` instead of giving up at the first one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
import psycopg_pool

T = TypeVar("T")

OUTAGE_GRACE_S = 60.0
"""How long a waiter without a timeout of its own keeps retrying a database it cannot
reach (seconds of continuous failure) before it gives up and raises the last error."""

BRIEF_POOL_WAIT_S = 5.0
"""How long a look made while waiting for a run (its status, its steps) and a statement
of a worker's shutdown wait for a pool connection (seconds), instead of the pool's 30 s.
The pool budget (Engine Design: Pool Budget) keeps a connection free for them, so a
longer wait means the database is out of reach: a look fails and is retried within the
outage grace; a shutdown skips what is left to write (leases expire by themselves)."""

_RETRY_MIN_S = 0.1
_RETRY_MAX_S = 1.0


def database_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the database itself is out of reach rather than that a
    statement failed: :class:`psycopg.InterfaceError` (a closed connection),
    :class:`psycopg_pool.PoolTimeout` (no connection could be had), and a
    :class:`psycopg.OperationalError` without SQLSTATE (the socket broke), of class 08
    (connection exception) or 57P0x (the server is shutting down, e.g. ``pg_ctl restart``:
    57P01 ``terminating connection due to administrator command``)."""
    if isinstance(exc, psycopg.InterfaceError | psycopg_pool.PoolTimeout):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state.startswith("57P0")


PREPARE_HINT = (
    "prepared statements fail on this connection (%s: %s): a pooler in transaction mode "
    "(PgBouncer before 1.21, or without max_prepared_statements) sends consecutive "
    "transactions to different server connections. Turn them off: --no-prepare or "
    "CYCLONE_PREPARE=0 (Client(prepare=False)); see docs/deployment.md#pgbouncer. The "
    "steps it hits are left to their lease, no attempt charged"
)
"""The warning :func:`warn_prepared_statements` logs once per process."""

_prepare_warned = threading.Event()


def prepared_statement_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says that a statement psycopg prepared on this connection is not
    what the server has: ``prepared statement "_pg3_0" does not exist`` (SQLSTATE 26000,
    :class:`psycopg.errors.InvalidSqlStatementName`) or ``... already exists`` (42P05,
    :class:`psycopg.errors.DuplicatePreparedStatement`), what a pooler in transaction mode
    causes when prepared statements are on (docs/deployment.md#pgbouncer). Never the
    statement's or the handler's fault."""
    return isinstance(
        exc,
        psycopg.errors.InvalidSqlStatementName | psycopg.errors.DuplicatePreparedStatement,
    )


def wait_bound_passed(exc: BaseException) -> bool:
    """Whether ``exc`` says a statement gave up at a bound set on it: ``lock_timeout``
    (55P03, :class:`psycopg.errors.LockNotAvailable`) or ``statement_timeout`` / a cancel
    of the backend (57014, :class:`psycopg.errors.QueryCanceled`), as the statements of a
    worker's shutdown do when another session holds a lock they need. Not a bug."""
    return isinstance(exc, psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled)


def warn_prepared_statements(log: logging.Logger, exc: BaseException) -> None:
    """Log :data:`PREPARE_HINT` (naming the fix) for ``exc``, once per process."""
    if _prepare_warned.is_set():
        return
    _prepare_warned.set()
    text = str(exc).strip().splitlines()
    log.warning(PREPARE_HINT, type(exc).__name__, text[0] if text else "")


class Outage:
    """One spell of failing to reach the database, shared by every call ridden out through
    it (:meth:`ride`), so that a command making several calls in a row (a follower's
    status looks and step reads) gives up ``grace`` seconds after the outage began, not
    ``grace`` seconds after each call first failed.

    The spell begins when the first failing call began (a look that waited for a pool
    connection the whole time counts from its start) and ends at the first call that
    works. It gives up at ``grace`` seconds after its beginning, or at ``deadline`` (a
    ``time.monotonic()`` instant; None: none), whichever comes first. ``on_lost(exc)`` is
    called once per spell, at its first failure. ``clock`` and ``sleep`` (monotonic
    seconds) are for tests. Not thread-safe: one caller's calls."""

    def __init__(
        self,
        *,
        grace: float = OUTAGE_GRACE_S,
        deadline: float | None = None,
        on_lost: Callable[[Exception], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.grace, self.deadline, self.on_lost = grace, deadline, on_lost
        self._clock, self._sleep = clock, sleep
        self.since: float | None = None
        """When the current spell began (``time.monotonic()``); None: the database works."""

    def give_up_at(self) -> float | None:
        """The instant the current spell gives up at; None outside a spell."""
        if self.since is None:
            return None
        at = self.since + self.grace
        return at if self.deadline is None else min(at, self.deadline)

    def ride(self, call: Callable[[], T]) -> T:
        """``call()``, retried while it fails with :func:`database_lost` errors, with a
        backoff of 0.1 s doubling to 1 s, until the spell gives up (:meth:`give_up_at`);
        then the last error is raised. Any other exception propagates at once."""
        delay = _RETRY_MIN_S
        while True:
            began = self._clock()
            try:
                result = call()
            except Exception as exc:
                if not database_lost(exc):
                    raise
                if self.since is None:
                    self.since = began
                    if self.on_lost is not None:
                        self.on_lost(exc)
                now = self._clock()
                give_up_at = self.give_up_at()
                assert give_up_at is not None
                if now >= give_up_at:
                    raise
                self._sleep(min(delay, give_up_at - now))
                delay = min(delay * 2, _RETRY_MAX_S)
                continue
            self.since = None
            return result


def ride_out(
    call: Callable[[], T],
    *,
    deadline: float | None = None,
    grace: float = OUTAGE_GRACE_S,
    on_lost: Callable[[Exception], None] | None = None,
) -> T:
    """``call()`` ridden through an outage of its own (:meth:`Outage.ride`): retried while
    it fails with :func:`database_lost` errors, with a backoff of 0.1 s doubling to 1 s,
    until ``deadline`` (a ``time.monotonic()`` instant; None: none) or ``grace`` seconds
    after the failing call began, whichever comes first; then the last error is raised.
    ``on_lost(exc)`` is called once, at the first failure (to say so once, not at every
    retry). Any other exception propagates at once."""
    return Outage(grace=grace, deadline=deadline, on_lost=on_lost).ride(call)

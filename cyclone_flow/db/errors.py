"""Telling "the database is out of reach" from every other database error, and riding
such an outage out (a Postgres restart, a failover, a pooler restarting).

:func:`database_lost` is the one test: the connection broke, not the statement. What
waits on the database for a user (``Client.wait``, ``submit --wait``, ``cyclone-flow run``)
retries such errors with :func:`ride_out` instead of giving up at the first one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
import psycopg_pool

T = TypeVar("T")

OUTAGE_GRACE_S = 60.0
"""How long a waiter without a timeout of its own keeps retrying a database it cannot
reach (seconds of continuous failure) before it gives up and raises the last error."""

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


def ride_out(
    call: Callable[[], T],
    *,
    deadline: float | None = None,
    grace: float = OUTAGE_GRACE_S,
    on_lost: Callable[[Exception], None] | None = None,
) -> T:
    """``call()``, retried while it fails with :func:`database_lost` errors, with a
    backoff of 0.1 s doubling to 1 s, until ``deadline`` (a ``time.monotonic()`` instant;
    None: none) or ``grace`` seconds after the first failure, whichever comes first; then
    the last error is raised. ``on_lost(exc)`` is called once, at the first failure (to
    say so once, not at every retry). Any other exception propagates at once."""
    given_up_at: float | None = None
    delay = _RETRY_MIN_S
    while True:
        try:
            return call()
        except Exception as exc:
            if not database_lost(exc):
                raise
            now = time.monotonic()
            if given_up_at is None:
                given_up_at = now + grace
                if deadline is not None:
                    given_up_at = min(given_up_at, deadline)
                if on_lost is not None:
                    on_lost(exc)
            if now >= given_up_at:
                raise
            time.sleep(min(delay, max(0.0, given_up_at - now)))
            delay = min(delay * 2, _RETRY_MAX_S)

"""The connection pool a client opens for a database URL: READ COMMITTED on every
connection, TCP keepalives, prepared statements on or off, and a cheap check at every
checkout so that a connection a restart killed is never handed out.

The check (:class:`BrokenConnectionCheck`) costs no round trip: a pooled connection is
idle, so the server has nothing to say to it; a socket with something to read (the
``terminating connection`` notice of a restart, a FIN, an error) or a connection psycopg
already knows is broken is refused, and the pool's other idle connections are then
checked at once in the background, so one restart costs one refused connection, not one
per pooled connection. A socket that went silent without a FIN (a half-open connection)
is left to the TCP keepalives. The socket is only looked at for a connection that was
last checked out more than :data:`RECENT_CHECKOUT_S` ago: that look is a system call,
which hands the GIL to another thread, and on a busy client (the claim loop and the
group commit check out a connection for every statement) those handoffs cost more than
the check is worth; a connection in use that recently is as likely to have been killed
while in use as while idle, and that is noticed by the statement that uses it.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
import time
import weakref
from typing import Any

import psycopg
from psycopg import IsolationLevel
from psycopg_pool import ConnectionPool

KEEPALIVES: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 10,  # seconds of silence before the first probe
    "keepalives_interval": 5,  # seconds between probes
    "keepalives_count": 3,  # unanswered probes before the kernel drops the connection
}
"""libpq TCP keepalive parameters of every pooled connection (ignored on a Unix socket):
a peer that vanished is noticed by the kernel within about 25 s of silence."""

RECENT_CHECKOUT_S = 1.0
"""Seconds since a connection's previous checkout within which
:class:`BrokenConnectionCheck` does not look at its socket (see the module docstring)."""


def configure(conn: psycopg.Connection[Any]) -> None:
    """Pin READ COMMITTED on a new pooled connection, whatever the database's or the
    role's ``default_transaction_isolation``: every transaction of the connection then
    begins with ``BEGIN ISOLATION LEVEL READ COMMITTED`` (no extra round trip). The
    engine's "all dependencies completed" check relies on it."""
    conn.isolation_level = IsolationLevel.READ_COMMITTED


class BrokenConnectionCheck:
    """The pool's ``check``: raises :class:`psycopg.OperationalError` for a connection
    that is closed, in a bad state, or whose socket has something to read while it sits
    idle in the pool (looked at when its previous checkout is ``recent_s`` seconds old or
    more: see the module docstring); then checks the pool's other idle connections on a
    background thread (one sweep at a time)."""

    def __init__(self, recent_s: float = RECENT_CHECKOUT_S) -> None:
        self.pool: ConnectionPool[Any] | None = None
        self.recent_s = recent_s
        self._sweeping = threading.Lock()
        self._checked_out: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = (
            weakref.WeakKeyDictionary()
        )
        self.refused = 0
        """Connections refused so far."""

    def __call__(self, conn: psycopg.Connection[Any]) -> None:
        now = time.monotonic()
        last = self._checked_out.get(conn)
        self._checked_out[conn] = now
        reason = _broken(conn, look=last is None or now - last >= self.recent_s)
        if reason is None:
            return
        self.refused += 1
        # closed, so that the pool discards it and connects a new one (a connection it
        # still thinks works would go back to the pool and be refused again and again)
        with contextlib.suppress(Exception):
            conn.close()
        self._sweep()
        raise psycopg.OperationalError(f"pooled connection is broken: {reason}")

    def _sweep(self) -> None:
        pool = self.pool
        if pool is None or not self._sweeping.acquire(blocking=False):
            return

        def sweep() -> None:
            try:
                pool.check()  # round trip per idle connection; dead ones fail at once
            except Exception:
                pass  # the pool is closing, or the database is down: checkouts recheck
            finally:
                self._sweeping.release()

        threading.Thread(target=sweep, name="cyclone-pool-check", daemon=True).start()


def _broken(conn: psycopg.Connection[Any], *, look: bool = True) -> str | None:
    if conn.closed or conn.broken:
        return "closed"
    if conn.pgconn.status != psycopg.pq.ConnStatus.OK:
        return "bad connection status"
    if not look:
        return None
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        ready = poller.poll(0)
    except (OSError, ValueError, psycopg.Error) as exc:
        return str(exc)
    return "the server closed it or sent an unexpected message" if ready else None


_CLOSED_ON_PURPOSE: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()


class _QuietDiscard(logging.Filter):
    """Drops psycopg_pool's "discarding closed connection" warning for a connection the
    engine closed itself before giving it back (:func:`close_and_return`): an expected
    end, not trouble. The warning for any other closed connection stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and args and isinstance(args[0], psycopg.Connection):
            return args[0] not in _CLOSED_ON_PURPOSE
        return True


logging.getLogger("psycopg.pool").addFilter(_QuietDiscard())


def close_and_return(pool: ConnectionPool[Any], conn: psycopg.Connection[Any]) -> None:
    """Close ``conn`` (a connection of ``pool``: whatever session state it had goes with
    it, e.g. its LISTENs) and give it back, so that the pool replaces it, without the
    pool's warning about a closed connection."""
    _CLOSED_ON_PURPOSE.add(conn)
    with contextlib.suppress(Exception):
        conn.close()
    pool.putconn(conn)


def open_pool(
    conninfo: str, *, min_size: int, max_size: int, name: str, prepare: bool = True
) -> ConnectionPool[Any]:
    """An open pool of ``min_size`` to ``max_size`` connections to ``conninfo``, with
        :func:`configure`, :class:`BrokenConnectionCheck` and :data:`KEEPALIVES` (those
    ``conninfo`` does not set itself). With
        ``prepare=False`` no statement is ever prepared on the server
        (``prepare_threshold=None``): what PgBouncer in transaction mode before 1.21 (or
        without ``max_prepared_statements``) needs, since consecutive transactions of one
        client connection may run on different server connections."""
    check = BrokenConnectionCheck()
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    kwargs: dict[str, Any] = {k: v for k, v in KEEPALIVES.items() if k not in given}
    if not prepare:
        kwargs["prepare_threshold"] = None
    pool: ConnectionPool[Any] = ConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        kwargs=kwargs,
        configure=configure,
        check=check,
        open=False,
        name=name,
    )
    check.pool = pool
    pool.open()
    return pool

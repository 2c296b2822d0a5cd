"""The statements of ``sql/session.sql`` (no table): the database clock and the session's
settings (plan mode, isolation, index-order reads, bounded waits, pipelined BEGIN/COMMIT)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cyclone_flow.db.conn import Pending, SessionLike, execute, nothing


def pg_now(s: SessionLike, *, now: datetime | None = None) -> datetime:
    """The database's ``now()``, or ``now`` when a test pins it."""
    row = execute(s, "pg_now", {"now": now}).fetchone()
    assert row is not None  # a SELECT of one value returns its row
    value: datetime = row[0]
    return value


def send_session_force_generic_plans(s: SessionLike) -> Pending[None]:
    """Send ``SET LOCAL plan_cache_mode = force_generic_plan`` (first in a completion's
    pipeline)."""
    return Pending(execute(s, "session_force_generic_plans"), nothing)


def session_force_generic_plans(s: SessionLike) -> None:
    """Generic plans for the rest of the transaction (see
    :func:`send_session_force_generic_plans`)."""
    send_session_force_generic_plans(s).result()


def send_session_begin(s: SessionLike) -> Pending[None]:
    """Send ``BEGIN`` on an autocommit connection, as the first statement of a transaction
    sent whole in one pipeline (end it with :func:`send_session_commit`)."""
    return Pending(execute(s, "session_begin"), nothing)


def session_begin(s: SessionLike) -> None:
    """Begin a transaction on an autocommit connection (see :func:`send_session_begin`)."""
    send_session_begin(s).result()


def send_session_set_index_order(s: SessionLike) -> Pending[None]:
    """Send sequential scans, sorts and JIT off for the rest of the transaction begun by
    :func:`send_session_begin`: its reads walk an index in order whatever the statistics
    say, and are never JIT-compiled for the disable cost that puts in their plans."""
    return Pending(execute(s, "session_set_index_order"), nothing)


def session_set_index_order(s: SessionLike) -> None:
    """Sequential scans, sorts and JIT off for the rest of the transaction (see
    :func:`send_session_set_index_order`)."""
    send_session_set_index_order(s).result()


def send_session_commit(s: SessionLike) -> Pending[None]:
    """Send ``COMMIT``: the last statement of a transaction begun by
    :func:`send_session_begin`."""
    return Pending(execute(s, "session_commit"), nothing)


def session_commit(s: SessionLike) -> None:
    """Commit a transaction begun by :func:`session_begin`."""
    send_session_commit(s).result()


def session_set_read_snapshot(s: SessionLike) -> None:
    """Make the transaction just begun on ``s`` read-only and REPEATABLE READ: its reads
    see one snapshot (send it first)."""
    execute(s, "session_set_read_snapshot")


def session_bound_waits(s: SessionLike, *, seconds: float) -> None:
    """Bound every later statement of the transaction on ``s`` (begun: ``SET LOCAL``) to
    ``seconds`` of lock wait and of run time (``lock_timeout`` and ``statement_timeout``;
    at least 1 ms): past it the statement raises ``LockNotAvailable`` or ``QueryCanceled``
    (a worker's shutdown, docs/deployment.md: Graceful shutdown)."""
    execute(s, "session_bound_waits", {"ms": str(max(1, round(seconds * 1000)))})


def session_set_read_committed(s: SessionLike) -> None:
    """Make the session's default isolation READ COMMITTED (``SET SESSION
    CHARACTERISTICS``; run in autocommit). :func:`cyclone_flow.db.conn.pin_read_committed`
    runs this statement by name (this module imports ``conn``, not the other way)."""
    execute(s, "session_set_read_committed")


def send_session_get_isolation(s: SessionLike) -> Pending[tuple[str, str]]:
    """Send the check of a completion transaction's isolation: its result is the
    transaction's isolation (``"read committed"`` unless a handler changed it) and the
    session's default isolation."""
    return Pending(execute(s, "session_get_isolation"), _isolation)


def session_get_isolation(s: SessionLike) -> tuple[str, str]:
    """The transaction's isolation and the session's default isolation (see
    :func:`send_session_get_isolation`)."""
    return send_session_get_isolation(s).result()


def _isolation(cursor: Any) -> tuple[str, str]:
    row = cursor.fetchone()
    assert row is not None  # a SELECT of values returns its row
    return row[0], row[1]

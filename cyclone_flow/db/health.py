"""The statements of ``sql/health.sql`` (no table of its own: statistics and catalogs
about the engine's tables), one typed function each, for the health advisor
(:mod:`cyclone_flow.advisor`); plus :func:`explain_claim`, the planner's view of the
engine's own claim statement."""

from __future__ import annotations

import json
from typing import Any

from cyclone_flow._json import JSON
from cyclone_flow.db.conn import SessionLike, execute, execute_rows
from cyclone_flow.db.rows import (
    ConnectionBudget,
    HeldSequence,
    IndexSize,
    OpenTransaction,
    OrphanedLeases,
    TableHealth,
    XminHolder,
    rows_of,
)

_TABLES = rows_of(TableHealth)
_OPEN = rows_of(OpenTransaction)
_XMIN = rows_of(XminHolder)
_INDEX = rows_of(IndexSize)
_ORPHANED = rows_of(OrphanedLeases)
_HELD = rows_of(HeldSequence)
_CONNECTIONS = rows_of(ConnectionBudget)


def health_list_tables(s: SessionLike, *, schema: str) -> list[TableHealth]:
    """The vacuum state of ``cyclone_steps`` and ``cyclone_runs`` of ``schema``."""
    return execute_rows(s, "health_list_tables", {"schema": schema}, _TABLES).fetchall()


def health_list_open_transactions(
    s: SessionLike, *, min_age_s: float, limit: int
) -> list[OpenTransaction]:
    """Transactions of this database open for ``min_age_s`` seconds or more, oldest first
    (at most ``limit``), this session's left out."""
    params = {"min_age_s": min_age_s, "limit": limit}
    return execute_rows(s, "health_list_open_transactions", params, _OPEN).fetchall()


def health_get_oldest_xmin_holder(s: SessionLike) -> OpenTransaction | None:
    """The oldest transaction of this database holding the xmin horizon back, whatever
    its age (this session's left out); None when none does."""
    return execute_rows(s, "health_get_oldest_xmin_holder", None, _OPEN).fetchone()


def health_list_xmin_slots(s: SessionLike) -> list[XminHolder]:
    """Replication slots and prepared transactions holding the xmin horizon back."""
    return execute_rows(s, "health_list_xmin_slots", None, _XMIN).fetchall()


def health_get_claim_index(s: SessionLike, *, schema: str) -> IndexSize | None:
    """Size and counted entries of ``schema``'s claim index (None: no such index)."""
    return execute_rows(s, "health_get_claim_index", {"schema": schema}, _INDEX).fetchone()


def health_explain_claim_read(s: SessionLike, *, queue: str, limit: int) -> JSON:
    """``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` of the claim's read of ``queue`` (up to
    ``limit`` rows; nothing locked or written): the plan's JSON (a list of one object)."""
    row = execute(s, "health_explain_claim_read", {"queue": queue, "limit": limit}).fetchone()
    return _plan(row)


def health_list_orphaned_leases(s: SessionLike, *, limit: int) -> list[OrphanedLeases]:
    """Running steps per lease owner without a live heartbeat (at most ``limit`` owners)."""
    return execute_rows(s, "health_list_orphaned_leases", {"limit": limit}, _ORPHANED).fetchall()


def health_list_held_sequences(s: SessionLike, *, limit: int) -> list[HeldSequence]:
    """Sequences with held runs and the open run at their head (at most ``limit``)."""
    return execute_rows(s, "health_list_held_sequences", {"limit": limit}, _HELD).fetchall()


def health_get_connections(s: SessionLike) -> ConnectionBudget:
    """The server's connection budget, the connections in use and the live workers."""
    row = execute_rows(s, "health_get_connections", None, _CONNECTIONS).fetchone()
    assert row is not None  # a SELECT of values returns its row
    return row


def explain_claim(s: SessionLike, *, queue: str, owner: str, ttl_s: float, limit: int) -> JSON:
    """The planner's ``EXPLAIN (FORMAT JSON)`` of the engine's own claim statement
    (``step_claim_if_available``, not executed: nothing is claimed) for ``queue`` on the
    real table: the plan's JSON. The one statement of this module not in
    ``health.sql``: it is the claim's own text behind ``EXPLAIN``."""
    params = {"queue": queue, "limit": limit, "owner": owner, "ttl_us": int(ttl_s * 1_000_000)}
    row = s.conn.execute("EXPLAIN (FORMAT JSON) " + s.q["step_claim_if_available"], params)
    return _plan(row.fetchone())


def _plan(row: Any) -> JSON:
    assert row is not None  # EXPLAIN returns its plan
    value = row[0]
    return json.loads(value) if isinstance(value, str) else value

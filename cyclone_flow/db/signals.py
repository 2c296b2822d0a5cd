"""The statements of ``sql/signals.sql`` (table ``cyclone_signals``), one typed function
each."""

from __future__ import annotations

from cyclone_flow.db.conn import SessionLike, execute, execute_rows
from cyclone_flow.db.rows import SignalRoom, rows_of

_ROOM = rows_of(SignalRoom)


def signal_count_awaiting(s: SessionLike, *, run_id: str, name: str) -> SignalRoom:
    """How many wait_signal nodes of ``run_id`` still await ``name``, and how many signals
    of that name are kept unconsumed."""
    params = {"run_id": run_id, "name": name}
    row = execute_rows(s, "signal_count_awaiting", params, _ROOM).fetchone()
    return row if row is not None else SignalRoom(0, 0)


def signal_insert(s: SessionLike, *, run_id: str, name: str, payload: str) -> None:
    """Keep signal ``name`` with ``payload`` (JSON text) for its run."""
    execute(s, "signal_insert", {"run_id": run_id, "name": name, "payload": payload})


def signal_consume_if_unconsumed(
    s: SessionLike, *, run_id: str, name: str, node: str
) -> str | None:
    """The oldest unconsumed signal ``name`` of the run -> consumed by ``node``; its
    payload as JSON text, None when none is kept."""
    params = {"run_id": run_id, "name": name, "node": node}
    row = execute(s, "signal_consume_if_unconsumed", params).fetchone()
    return None if row is None else str(row[0])

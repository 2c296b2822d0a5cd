"""The statements of ``sql/sequences.sql`` (table ``cyclone_sequences``), one typed function
each. Lock order: a run's row lock, then its sequence's row lock."""

from __future__ import annotations

from cyclone_flow.db.conn import SessionLike, execute


def sequence_take_next_pos(s: SessionLike, *, key: str) -> int:
    """Take sequence ``key``'s row lock for the rest of the transaction and hand out its
    next position."""
    row = execute(s, "sequence_take_next_pos", {"key": key}).fetchone()
    assert row is not None  # the upsert returns its row
    return int(row[0])


def sequence_lock(s: SessionLike, *, key: str) -> None:
    """Take sequence ``key``'s row lock for the rest of the transaction."""
    execute(s, "sequence_lock", {"key": key})

"""Sequences (seeds: Sequences): runs sharing a key execute one at a time, in submission
order. The statements of a sequence as decisions, below :mod:`cyclone_flow.engine.advance`
(which releases the runs these functions unhold).

Lock order (no deadlock between these paths): a run's row lock, then its sequence's row
lock (``cyclone_sequences``), then other runs of the sequence only with ``SKIP LOCKED``.
Submit takes only the sequence lock (its run is new).
"""

from __future__ import annotations

from cyclone_flow.db import runs, sequences
from cyclone_flow.engine.tx import Tx


def take_position(tx: Tx, key: str) -> tuple[int, bool]:
    """For a new run of sequence ``key``: take the sequence's row lock, hand out the next
    position, and say whether the run is held (an earlier run is neither completed nor
    cancelled). Returns ``(position, held)``."""
    position = sequences.sequence_take_next_pos(tx, key=key)
    return position, runs.run_exists_open_in_sequence(tx, key=key)


def unhold_next(tx: Tx, key: str) -> list[str]:
    """Unhold the head run of sequence ``key`` when it is held (under the sequence's row
    lock); the run ids to release as at submit (none, or one)."""
    sequences.sequence_lock(tx, key=key)
    return runs.run_release_next_in_sequence_if_held(tx, key=key)


def key_of(tx: Tx, run_id: str) -> str | None:
    """The sequence key of a run, None when it is in none."""
    return runs.run_get_sequence(tx, run_id=run_id)


def cancel_failed(tx: Tx, run_id: str, reason: str) -> bool:
    """failed -> cancelled for a run of a sequence (the caller holds the run lock), so the
    runs held behind it go on; False for any other run."""
    return runs.run_cancel_if_failed_in_sequence(tx, run_id=run_id, error=reason)

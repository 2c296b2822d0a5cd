"""The statements of ``sql/rate_windows.sql`` (table ``cyclone_rate_windows``), one typed
function each; the rows are written by the limited claim (``step_claim_limited_if_available``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from cyclone_flow.db.conn import SessionLike, execute, execute_rows
from cyclone_flow.db.rows import RateWindow, rows_of

_WINDOW = rows_of(RateWindow)


def rate_window_list(s: SessionLike, *, keys: Sequence[str]) -> list[RateWindow]:
    """The sliding logs of the rate keys ``keys`` (a key never claimed, or idle and
    pruned, has none)."""
    return execute_rows(s, "rate_window_list", {"keys": list(keys)}, _WINDOW).fetchall()


def rate_window_delete_if_idle(s: SessionLike, *, now: datetime | None = None) -> list[str]:
    """Delete the rows of the rate keys idle for longer than their window at ``now`` (None:
    the database's clock): they count no claim any more; return their keys."""
    rows = execute(s, "rate_window_delete_if_idle", {"now": now}).fetchall()
    return [str(r[0]) for r in rows]

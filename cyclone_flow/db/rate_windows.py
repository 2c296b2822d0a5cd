"""The statements of ``sql/rate_windows.sql`` (table ``cyclone_rate_windows``), one typed
function each; the rows are written by the limited claim (``step_claim_limited_if_available``).
"""

from __future__ import annotations

from collections.abc import Sequence

from cyclone_flow.db.conn import SessionLike, execute_rows
from cyclone_flow.db.rows import RateWindow, rows_of

_WINDOW = rows_of(RateWindow)


def rate_window_list(s: SessionLike, *, keys: Sequence[str]) -> list[RateWindow]:
    """The current-window rows of the rate keys ``keys`` (a key never claimed has none)."""
    return execute_rows(s, "rate_window_list", {"keys": list(keys)}, _WINDOW).fetchall()

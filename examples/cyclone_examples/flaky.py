"""Failure handling example (``examples/flows/flaky_pipeline.yaml``; see docs/failures.md).

Real data (``examples/data/stocks.csv``) through three kinds of trouble:

- :func:`fetch_prices`: a price feed that is down for its first ``outage_attempts``
  attempts (a simulated outage, decided by ``ctx.attempt`` so every run behaves the same):
  the node's ``retry`` retries it with exponential backoff.
- :func:`latest_prices`: a quote lookup whose first attempt hangs (``hang_first``): it
  waits with ``ctx.wait_cancelled()``, the node's ``timeout`` tells it to stop, the attempt
  fails with kind ``timeout`` and the next attempt answers.
- :func:`full_history`: a strict check that every symbol covers the whole period. On the
  real file it fails (GOOG is listed from 2004-08 only) with :class:`PermanentError`, so
  it is discarded without retries; its dependent declares ``on_dep_failure:
  cancel_branch``, so only that branch is cancelled and the run still completes.

Pure transforms: :func:`latest_by_symbol`, :func:`late_starters`, :func:`rank_by_total_return`.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cyclone_flow import PermanentError

from ._common import data_file, file_name, require
from .stocks import DEFAULT_FILE, month_index, parse_prices

if TYPE_CHECKING:
    from cyclone_flow import Context

HANG_LIMIT_S = 600.0
"""How long a hanging attempt of :func:`latest_prices` waits to be told to stop."""


# --- pure transforms -------------------------------------------------------------------------


def latest_by_symbol(series: Mapping[str, Sequence[Sequence[Any]]]) -> dict[str, Any]:
    """``{symbol: {"month", "price", "change_12m_pct"}}``: each symbol's last price and its
    change over the 12 months before it (None with less than 13 months), 2 decimals."""
    out: dict[str, Any] = {}
    for symbol, prices in series.items():
        if not prices:
            raise ValueError(f"{symbol}: no prices")
        month, price = prices[-1]
        change = None
        if len(prices) > 12:
            change = round((float(price) / float(prices[-13][1]) - 1) * 100, 2)
        out[symbol] = {"month": month, "price": float(price), "change_12m_pct": change}
    return out


def late_starters(series: Mapping[str, Sequence[Sequence[Any]]]) -> dict[str, int]:
    """``{symbol: months}``: the symbols whose prices start after the earliest first month
    of the file, with how many months later."""
    firsts = {symbol: month_index(prices[0][0]) for symbol, prices in series.items() if prices}
    if not firsts:
        return {}
    earliest = min(firsts.values())
    return {s: first - earliest for s, first in sorted(firsts.items()) if first > earliest}


def rank_by_total_return(series: Mapping[str, Sequence[Sequence[Any]]]) -> list[dict[str, Any]]:
    """Symbols by total return over their series, best first: ``[{"symbol",
    "total_return_pct"}, ...]`` (2 decimals)."""
    rows = [
        {
            "symbol": symbol,
            "total_return_pct": round((float(prices[-1][1]) / float(prices[0][1]) - 1) * 100, 2),
        }
        for symbol, prices in series.items()
        if prices
    ]
    rows.sort(key=lambda r: (-r["total_return_pct"], r["symbol"]))
    return rows


# --- handlers --------------------------------------------------------------------------------


def fetch_prices(ctx: Context, input: Any) -> dict[str, Any]:
    """Load the prices CSV through a feed that is down for the first ``outage_attempts``
    attempts (raises ``ConnectionError``: an ordinary, retried failure).

    Input ``{"file": "stocks.csv", "outage_attempts": 2}``; output ``{"file", "attempt",
    "symbols", "series": {symbol: [[YYYY-MM, price], ...]}}``.
    """
    outage = int(require(input, "outage_attempts") or 0)
    if ctx.attempt <= outage:
        raise ConnectionError(
            f"price feed unavailable (simulated outage, attempt {ctx.attempt} of the "
            f"{outage} that fail)"
        )
    name = file_name(input, DEFAULT_FILE)
    series = parse_prices(io.StringIO(data_file(name).read_text(encoding="utf-8")))
    return {"file": name, "attempt": ctx.attempt, "symbols": list(series), "series": series}


def latest_prices(ctx: Context, input: Any) -> dict[str, Any]:
    """Each symbol's latest price; with ``hang_first`` the first attempt hangs like a stuck
    remote call until the engine says its timeout passed, then gives up.

    Input ``{"series": <fetch_prices series>, "hang_first": true}``; output ``{"attempt",
    "latest": {symbol: {"month", "price", "change_12m_pct"}}}``.
    """
    hangs = bool(require(input, "hang_first")) and ctx.attempt == 1
    if hangs and ctx.wait_cancelled(HANG_LIMIT_S):  # cooperative: stop when told
        raise TimeoutError("quote service did not answer before the step's timeout")
    return {"attempt": ctx.attempt, "latest": latest_by_symbol(require(input, "series"))}


def full_history(ctx: Context, input: Any) -> dict[str, Any]:
    """Insist that every symbol covers the whole period of the file; a symbol that starts
    later makes a full-period comparison meaningless, which no retry can fix, so it raises
    :class:`PermanentError` (the step is discarded at once).

    Input ``{"series": <fetch_prices series>}``; output ``{"symbols": n}``.
    """
    late = late_starters(require(input, "series"))
    if late:
        which = ", ".join(f"{s} starts {m} months late" for s, m in late.items())
        raise PermanentError(f"not every symbol covers the whole period: {which}")
    return {"symbols": len(require(input, "series"))}


def rank_total_returns(ctx: Context, input: Any) -> dict[str, Any]:
    """Input ``{"series": ...}``; output ``{"ranking": rank_by_total_return(series)}``."""
    return {"ranking": rank_by_total_return(require(input, "series"))}


def report(ctx: Context, input: Any) -> dict[str, Any]:
    """Input ``{"latest": <latest_prices latest>, "feed_attempt": n, "quote_attempt": n}``;
    output the latest prices with the attempts each source needed, best 12-month change
    first."""
    latest = require(input, "latest")
    ranked = sorted(
        latest,
        key=lambda s: (latest[s]["change_12m_pct"] is None, -(latest[s]["change_12m_pct"] or 0)),
    )
    return {
        "symbols": ranked,
        "latest": latest,
        "feed_attempt": require(input, "feed_attempt"),
        "quote_attempt": require(input, "quote_attempt"),
    }

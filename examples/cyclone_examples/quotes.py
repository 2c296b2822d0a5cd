"""Quotes example (``examples/flows/quotes.yaml``): one run per stock symbol, each asking
a rate-limited price feed (here ``examples/data/stocks.csv``) for the symbol's latest
price. The flow's ``concurrency`` and ``rate_limit`` keys bound the calls
(docs/flow-control.md); the handler itself knows nothing about them.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from ._common import data_file, require
from .flaky import latest_by_symbol
from .stocks import DEFAULT_FILE, parse_prices

if TYPE_CHECKING:
    from cyclone_flow import Context


def latest_quote(ctx: Context, input: Any) -> dict[str, Any]:
    """The latest monthly price of ``input["symbol"]``: ``{"symbol", "month", "price",
    "change_12m_pct"}``. Raises ValueError for a symbol the feed does not know."""
    symbol = str(require(input, "symbol")).upper()
    series = parse_prices(io.StringIO(data_file(DEFAULT_FILE).read_text(encoding="utf-8")))
    if symbol not in series:
        raise ValueError(f"unknown symbol {symbol!r}: the feed has {', '.join(sorted(series))}")
    return {"symbol": symbol, **latest_by_symbol({symbol: series[symbol]})[symbol]}

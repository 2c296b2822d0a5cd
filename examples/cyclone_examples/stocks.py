"""Stock prices example (``examples/flows/stocks.yaml``): a diamond.

``load_prices`` -> (``monthly_returns``, ``volatility``) -> ``report``; ``prepare_table``
creates ``stock_report`` once, upstream of ``report``. Pure transforms: :func:`parse_prices`,
:func:`returns_by_symbol`, :func:`volatility_by_symbol`, :func:`build_report`.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._common import data_file, ensure_table, file_name, number, require

if TYPE_CHECKING:
    from cyclone_flow import Context

DEFAULT_FILE = "stocks.csv"
COLUMNS = ("symbol", "date", "price")
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
TABLE = "stock_report"

CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS stock_report (
    run_id     text        NOT NULL,
    node       text        NOT NULL,
    symbols    int         NOT NULL,
    report     jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, node)
)
"""

INSERT_REPORT = """
INSERT INTO stock_report (run_id, node, symbols, report)
VALUES (%s, %s, %s, %s::jsonb)
ON CONFLICT (run_id, node) DO NOTHING
"""

Series = dict[str, list[list[Any]]]
"""symbol -> ``[[YYYY-MM, price], ...]`` in month order."""


# --- pure transforms -------------------------------------------------------------------------


def parse_month(text: str, line: int) -> str:
    """``"Jan 1 2000"`` -> ``"2000-01"`` (locale-independent)."""
    parts = text.split()
    if len(parts) != 3 or parts[0] not in MONTHS or not (parts[1] + parts[2]).isdigit():
        raise ValueError(f"line {line}: date is not like 'Jan 1 2000': {text!r}")
    return f"{int(parts[2]):04d}-{MONTHS.index(parts[0]) + 1:02d}"


def parse_prices(lines: Iterable[str]) -> Series:
    """Parse and validate the stocks CSV into monthly price series per symbol.

    Raises ``ValueError`` (with the line number) on a wrong header, an empty symbol, a bad
    date, a non-positive price, a duplicate (symbol, month) or a gap in a symbol's months.
    """
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != COLUMNS:
        raise ValueError(f"expected header {','.join(COLUMNS)}, got {header!r}")
    prices: dict[str, dict[str, float]] = {}
    for line, record in enumerate(reader, start=2):
        if not record:
            continue
        if len(record) != len(COLUMNS):
            raise ValueError(f"line {line}: expected {len(COLUMNS)} fields, got {len(record)}")
        symbol, date_text, price_text = (f.strip() for f in record)
        if not symbol:
            raise ValueError(f"line {line}: empty symbol")
        month = parse_month(date_text, line)
        price = number(price_text, "price", line)
        if price <= 0:
            raise ValueError(f"line {line}: price must be positive, got {price}")
        series = prices.setdefault(symbol, {})
        if month in series:
            raise ValueError(f"line {line}: duplicate month {month} for {symbol}")
        series[month] = price
    if not prices:
        raise ValueError("the file has no data rows")
    result: Series = {}
    for symbol in sorted(prices):
        months = sorted(prices[symbol])
        for before, after in itertools.pairwise(months):
            if month_index(after) - month_index(before) != 1:
                raise ValueError(f"{symbol}: months missing between {before} and {after}")
        result[symbol] = [[m, prices[symbol][m]] for m in months]
    return result


def month_index(month: str) -> int:
    """``"2000-03"`` -> months since year 0 (for gap checks)."""
    year, mon = month.split("-")
    return int(year) * 12 + int(mon) - 1


def simple_returns(series: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """``[[month, return_pct], ...]``: percent change from the previous month, 2 decimals."""
    return [
        [month, round((float(price) / float(prev) - 1) * 100, 2)]
        for (_, prev), (month, price) in itertools.pairwise(series)
    ]


def returns_by_symbol(series: Mapping[str, Sequence[Sequence[Any]]]) -> dict[str, Any]:
    """Monthly returns per symbol, plus a per-symbol summary.

    Output ``{"monthly": {symbol: [[month, return_pct], ...]}, "summary": {symbol: {
    "first_month", "last_month", "months", "total_return_pct", "mean_monthly_return_pct",
    "best_month": {"month", "return_pct"}, "worst_month": {...}}}}``. ``months`` counts
    returns (prices - 1); a symbol with a single price gets null mean/best/worst.
    """
    monthly: dict[str, list[list[Any]]] = {}
    summary: dict[str, dict[str, Any]] = {}
    for symbol, prices in series.items():
        rets = simple_returns(prices)
        monthly[symbol] = rets
        best = max(rets, key=lambda r: r[1]) if rets else None
        worst = min(rets, key=lambda r: r[1]) if rets else None
        summary[symbol] = {
            "first_month": prices[0][0],
            "last_month": prices[-1][0],
            "months": len(rets),
            "total_return_pct": round((float(prices[-1][1]) / float(prices[0][1]) - 1) * 100, 2),
            "mean_monthly_return_pct": (
                round(statistics.fmean(r[1] for r in rets), 2) if rets else None
            ),
            "best_month": {"month": best[0], "return_pct": best[1]} if best else None,
            "worst_month": {"month": worst[0], "return_pct": worst[1]} if worst else None,
        }
    return {"monthly": monthly, "summary": summary}


def annualised_volatility(prices: Sequence[float]) -> float | None:
    """Sample standard deviation of monthly log returns x sqrt(12), in percent (2 decimals).

    ``None`` with fewer than three prices (fewer than two returns).
    """
    logs = [math.log(b / a) for a, b in itertools.pairwise(prices)]
    if len(logs) < 2:
        return None
    return round(statistics.stdev(logs) * math.sqrt(12) * 100, 2)


def volatility_by_symbol(series: Mapping[str, Sequence[Sequence[Any]]]) -> dict[str, Any]:
    """``{symbol: {"months": n_returns, "annualised_volatility_pct": x | None}}``."""
    return {
        symbol: {
            "months": max(len(prices) - 1, 0),
            "annualised_volatility_pct": annualised_volatility([float(p) for _, p in prices]),
        }
        for symbol, prices in series.items()
    }


def build_report(
    summary: Mapping[str, Mapping[str, Any]], volatility: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """Join the returns summary and the volatility per symbol (symbols of both, sorted).

    Output ``{"symbols": [{"symbol", <summary fields>, "annualised_volatility_pct"}, ...],
    "most_volatile": symbol | None, "least_volatile": symbol | None}``.
    """
    missing = set(summary) ^ set(volatility)
    if missing:
        raise ValueError(f"returns and volatility disagree on symbols: {sorted(missing)}")
    rows = [
        {
            "symbol": symbol,
            **summary[symbol],
            "annualised_volatility_pct": volatility[symbol]["annualised_volatility_pct"],
        }
        for symbol in sorted(summary)
    ]
    ranked = [r for r in rows if r["annualised_volatility_pct"] is not None]
    ranked.sort(key=lambda r: (r["annualised_volatility_pct"], r["symbol"]))
    return {
        "symbols": rows,
        "most_volatile": ranked[-1]["symbol"] if ranked else None,
        "least_volatile": ranked[0]["symbol"] if ranked else None,
    }


# --- handlers --------------------------------------------------------------------------------


def load_prices(ctx: Context, input: Any) -> dict[str, Any]:
    """Read and validate a prices CSV from ``examples/data``.

    Input ``{"file": "stocks.csv"}`` (``file`` null/missing: the default). Output
    ``{"file", "rows", "symbols": [...], "series": {symbol: [[YYYY-MM, price], ...]}}``.
    """
    name = file_name(input, DEFAULT_FILE)
    series = parse_prices(io.StringIO(data_file(name).read_text(encoding="utf-8")))
    return {
        "file": name,
        "rows": sum(len(s) for s in series.values()),
        "symbols": list(series),
        "series": series,
    }


def monthly_returns(ctx: Context, input: Any) -> dict[str, Any]:
    """Input ``{"series": <load_prices series>}``; output :func:`returns_by_symbol`."""
    return returns_by_symbol(require(input, "series"))


def volatility(ctx: Context, input: Any) -> dict[str, Any]:
    """Input ``{"series": <load_prices series>}``; output ``{"volatility":
    {symbol: {"months", "annualised_volatility_pct"}}}``."""
    return {"volatility": volatility_by_symbol(require(input, "series"))}


def prepare_table(ctx: Context, input: Any) -> dict[str, Any]:
    """Create ``stock_report`` if missing (in the completion transaction); input ignored.

    Output ``{"table": "stock_report"}``.
    """
    ensure_table(ctx.completion_tx(), TABLE, CREATE_TABLE)
    return {"table": TABLE}


def report(ctx: Context, input: Any) -> dict[str, Any]:
    """Join returns and volatility; store the report as one ``stock_report`` row per
    (run_id, node) in the completion transaction.

    Input ``{"summary": <monthly_returns summary>, "volatility": <volatility volatility>}``;
    output :func:`build_report`.
    """
    result = build_report(require(input, "summary"), require(input, "volatility"))
    ctx.completion_tx().execute(
        INSERT_REPORT, (ctx.run_id, ctx.node, len(result["symbols"]), json.dumps(result))
    )
    return result

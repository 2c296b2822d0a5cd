"""A report that waits for a person's approval: the wait_signal example
(``examples/flows/approval.yaml``).

``draft`` computes the average closing price per symbol of one year from
``examples/data/stocks.csv``; the ``approve`` node waits for the signal ``approved``
(send it with ``cyclone-flow signal RUN approved --payload '{"by": "ada"}'``); ``publish``
stores the approved report in the ``approved_stock_reports`` table inside its completion
transaction, or fails the run when the payload says ``"approved": false``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._common import data_file, ensure_table, require
from .stocks import parse_prices

if TYPE_CHECKING:
    from cyclone_flow import Context

TABLE = "approved_stock_reports"

CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS approved_stock_reports (
    run_id       text    NOT NULL,
    node         text    NOT NULL,
    year         int     NOT NULL,
    approved_by  text    NOT NULL,
    note         text,
    averages     jsonb   NOT NULL,
    PRIMARY KEY (run_id, node)
)
"""

INSERT_REPORT = """
INSERT INTO approved_stock_reports (run_id, node, year, approved_by, note, averages)
VALUES (%s, %s, %s, %s, %s, %s::jsonb)
ON CONFLICT (run_id, node) DO NOTHING
"""


# --- pure transforms -------------------------------------------------------------------------


def yearly_averages(series: Mapping[str, list[list[Any]]], year: int) -> dict[str, Any]:
    """Average monthly closing price per symbol in ``year`` (rounded to cents), with the
    number of months each average covers; symbols without a price that year are left out.
    Raises ``ValueError`` when no symbol has a price in ``year``."""
    prefix = f"{year:04d}-"
    averages: dict[str, float] = {}
    months: dict[str, int] = {}
    for symbol, points in series.items():
        prices = [p for m, p in points if m.startswith(prefix)]
        if prices:
            averages[symbol] = round(sum(prices) / len(prices), 2)
            months[symbol] = len(prices)
    if not averages:
        raise ValueError(f"no prices in {year}")
    return {"year": year, "averages": averages, "months": months}


def approval_of(payload: Any) -> tuple[str, str | None]:
    """``(approved_by, note)`` from a signal payload ``{"by": NAME, "approved": true,
    "note": ...}`` (``approved`` defaults to true). Raises ``ValueError`` for a payload
    without ``by`` and ``PermissionError`` for a rejection."""
    if not isinstance(payload, dict) or not isinstance(payload.get("by"), str):
        raise ValueError(f"the approval payload needs a 'by' name, got {payload!r}")
    note = payload.get("note")
    if payload.get("approved", True) is not True:
        raise PermissionError(f"rejected by {payload['by']}: {note or 'no reason given'}")
    return payload["by"], note if isinstance(note, str) else None


# --- handlers --------------------------------------------------------------------------------


def draft(ctx: Context, input: Any) -> dict[str, Any]:
    """``{"year": YYYY}`` -> the yearly averages of ``stocks.csv``."""
    year = require(input, "year")
    if isinstance(year, bool) or not isinstance(year, int):
        raise ValueError(f"year must be an integer, got {year!r}")
    with data_file("stocks.csv").open(encoding="utf-8", newline="") as fh:
        series = parse_prices(io.StringIO(fh.read()))
    return yearly_averages(series, year)


def publish(ctx: Context, input: Any) -> dict[str, Any]:
    """``{"report": draft output, "approval": signal payload}``: store the approved
    report (exactly once, with this step's completion), or fail permanently when the
    approval is a rejection."""
    from cyclone_flow import PermanentError

    report = require(input, "report")
    try:
        approved_by, note = approval_of(require(input, "approval"))
    except (ValueError, PermissionError) as exc:
        raise PermanentError(str(exc)) from exc
    conn = ctx.completion_tx()
    ensure_table(conn, TABLE, CREATE_TABLE)
    conn.execute(
        INSERT_REPORT,
        (
            ctx.run_id,
            ctx.node,
            report["year"],
            approved_by,
            note,
            json.dumps(report["averages"]),
        ),
    )
    return {"year": report["year"], "approved_by": approved_by, "symbols": len(report["averages"])}

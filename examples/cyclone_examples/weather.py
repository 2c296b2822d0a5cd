"""Seattle weather example (``examples/flows/seattle_weather.yaml``).

``load_daily`` -> ``monthly`` -> ``store`` (+ ``prepare_table``) -> ``summary``. The pure
transforms (:func:`parse_daily`, :func:`monthly_aggregates`, :func:`summarise`,
:func:`month_rows`) take and return plain data; the handlers only wire them to the engine.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections import Counter
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ._common import data_file, ensure_table, file_name, number, require

if TYPE_CHECKING:
    from cyclone_flow import Context

DEFAULT_FILE = "seattle-weather.csv"
COLUMNS = ("date", "precipitation", "temp_max", "temp_min", "wind", "weather")
"""CSV header, and the order of the values in each row of ``load_daily``'s output."""
WEATHER_KINDS = frozenset({"drizzle", "fog", "rain", "snow", "sun"})
TABLE = "weather_monthly"

CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS weather_monthly (
    run_id           text    NOT NULL,
    node             text    NOT NULL,
    month            text    NOT NULL,
    days             int     NOT NULL,
    temp_max_mean    numeric NOT NULL,
    temp_min_mean    numeric NOT NULL,
    precipitation_mm numeric NOT NULL,
    wind_max         numeric NOT NULL,
    weather          text    NOT NULL,
    PRIMARY KEY (run_id, node, month)
)
"""

INSERT_MONTH = """
INSERT INTO weather_monthly
    (run_id, node, month, days, temp_max_mean, temp_min_mean, precipitation_mm, wind_max, weather)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (run_id, node, month) DO NOTHING
"""


# --- pure transforms -------------------------------------------------------------------------


def parse_daily(lines: Iterable[str]) -> list[list[Any]]:
    """Parse and validate the weather CSV into rows ``[date, precipitation, temp_max, temp_min,
    wind, weather]`` (ISO date string, floats, weather kind), sorted by date.

    Raises ``ValueError`` (with the line number) on a wrong header, a bad date or number,
    ``temp_min > temp_max``, negative precipitation/wind, an unknown weather kind or a
    duplicate date.
    """
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != COLUMNS:
        raise ValueError(f"expected header {','.join(COLUMNS)}, got {header!r}")
    rows: list[list[Any]] = []
    seen: set[str] = set()
    for line, record in enumerate(reader, start=2):
        if not record:
            continue
        if len(record) != len(COLUMNS):
            raise ValueError(f"line {line}: expected {len(COLUMNS)} fields, got {len(record)}")
        date_text, precip, tmax, tmin, wind, weather = (f.strip() for f in record)
        try:
            day = dt.date.fromisoformat(date_text.replace("/", "-")).isoformat()
        except ValueError:
            raise ValueError(f"line {line}: date is not YYYY/MM/DD: {date_text!r}") from None
        if day in seen:
            raise ValueError(f"line {line}: duplicate date {day}")
        seen.add(day)
        precipitation = number(precip, "precipitation", line)
        temp_max = number(tmax, "temp_max", line)
        temp_min = number(tmin, "temp_min", line)
        wind_ms = number(wind, "wind", line)
        if precipitation < 0 or wind_ms < 0:
            raise ValueError(f"line {line}: precipitation and wind must not be negative")
        if temp_min > temp_max:
            raise ValueError(f"line {line}: temp_min {temp_min} is above temp_max {temp_max}")
        if weather not in WEATHER_KINDS:
            raise ValueError(f"line {line}: unknown weather {weather!r}")
        rows.append([day, precipitation, temp_max, temp_min, wind_ms, weather])
    if not rows:
        raise ValueError("the file has no data rows")
    rows.sort(key=lambda r: r[0])
    return rows


def most_common(values: Iterable[str]) -> str:
    """The most frequent value; ties go to the alphabetically first one."""
    counts = Counter(values)
    return min(counts, key=lambda v: (-counts[v], v))


def monthly_aggregates(rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """Aggregate daily rows (as produced by :func:`parse_daily`) per calendar month.

    Returns one dict per ``YYYY-MM``, in month order: ``month``, ``days``, ``temp_max_mean``,
    ``temp_min_mean``, ``precipitation_mm`` (total), ``wind_max``, ``weather`` (most common
    kind). Numbers are rounded to 2 decimals.
    """
    by_month: dict[str, list[Sequence[Any]]] = {}
    for row in rows:
        if len(row) != len(COLUMNS):
            raise ValueError(f"expected rows of {len(COLUMNS)} values {COLUMNS}, got {row!r}")
        by_month.setdefault(str(row[0])[:7], []).append(row)
    months = []
    for month in sorted(by_month):
        days = by_month[month]
        n = len(days)
        months.append(
            {
                "month": month,
                "days": n,
                "temp_max_mean": round(sum(float(d[2]) for d in days) / n, 2),
                "temp_min_mean": round(sum(float(d[3]) for d in days) / n, 2),
                "precipitation_mm": round(sum(float(d[1]) for d in days), 2),
                "wind_max": round(max(float(d[4]) for d in days), 2),
                "weather": most_common(str(d[5]) for d in days),
            }
        )
    return months


def month_rows(run_id: str, node: str, months: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Parameter tuples for :data:`INSERT_MONTH`, numbers as exact ``Decimal``."""
    return [
        (
            run_id,
            node,
            m["month"],
            int(m["days"]),
            Decimal(str(m["temp_max_mean"])),
            Decimal(str(m["temp_min_mean"])),
            Decimal(str(m["precipitation_mm"])),
            Decimal(str(m["wind_max"])),
            m["weather"],
        )
        for m in months
    ]


def summarise(months: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Small summary of the monthly aggregates: counts, range, extreme months, weather mix."""
    if not months:
        raise ValueError("no months to summarise")

    def pick(key: str, highest: bool = True) -> dict[str, Any]:
        best = (max if highest else min)(months, key=lambda m: m[key])
        return {"month": best["month"], key: best[key]}

    return {
        "months": len(months),
        "days": sum(int(m["days"]) for m in months),
        "first_month": months[0]["month"],
        "last_month": months[-1]["month"],
        "wettest_month": pick("precipitation_mm"),
        "driest_month": pick("precipitation_mm", highest=False),
        "hottest_month": pick("temp_max_mean"),
        "coldest_month": pick("temp_min_mean", highest=False),
        "windiest_month": pick("wind_max"),
        "weather_months": dict(sorted(Counter(m["weather"] for m in months).items())),
    }


# --- handlers --------------------------------------------------------------------------------


def load_daily(ctx: Context, input: Any) -> dict[str, Any]:
    """Read and validate a weather CSV from ``examples/data``.

    Input ``{"file": "seattle-weather.csv"}`` (``file`` null/missing: the default).
    Output ``{"file", "days", "first_day", "last_day", "columns", "rows"}`` with ``rows`` a
    list of ``[date, precipitation, temp_max, temp_min, wind, weather]`` (~70 KiB of JSON).
    """
    name = file_name(input, DEFAULT_FILE)
    text = data_file(name).read_text(encoding="utf-8")
    rows = parse_daily(io.StringIO(text))
    return {
        "file": name,
        "days": len(rows),
        "first_day": rows[0][0],
        "last_day": rows[-1][0],
        "columns": list(COLUMNS),
        "rows": rows,
    }


def monthly(ctx: Context, input: Any) -> dict[str, Any]:
    """Input ``{"rows": <load_daily rows>}``; output ``{"months": [<monthly aggregate>, ...]}``."""
    return {"months": monthly_aggregates(require(input, "rows"))}


def prepare_table(ctx: Context, input: Any) -> dict[str, Any]:
    """Create ``weather_monthly`` if missing (in the completion transaction); input ignored.

    Output ``{"table": "weather_monthly"}``.
    """
    ensure_table(ctx.completion_tx(), TABLE, CREATE_TABLE)
    return {"table": TABLE}


def store(ctx: Context, input: Any) -> dict[str, Any]:
    """Insert one ``weather_monthly`` row per month, keyed by (run_id, node, month).

    Input ``{"months": [<monthly aggregate>, ...]}``; output ``{"months": n}``. The rows
    commit with the step's completion; a retried attempt inserts nothing twice.
    """
    params = month_rows(ctx.run_id, ctx.node, require(input, "months"))
    if params:
        with ctx.completion_tx().cursor() as cur:
            cur.executemany(INSERT_MONTH, params)
    return {"months": len(params)}


def summary(ctx: Context, input: Any) -> dict[str, Any]:
    """Input ``{"file", "months": [...], "stored": n}``; output :func:`summarise` plus
    ``file`` and ``stored_rows``. This is the run's output (``summary`` is the only leaf).
    """
    result = summarise(require(input, "months"))
    return {"file": input.get("file"), "stored_rows": input.get("stored"), **result}

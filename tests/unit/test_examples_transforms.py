"""Pure transforms of the example handlers (examples/cyclone_examples): no database."""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import statistics
from collections import Counter
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from cyclone_examples import demo, stocks, weather
from cyclone_examples._common import DATA_DIR, data_file
from helpers.paths import EXAMPLES

WEATHER_CSV = EXAMPLES / "data" / "seattle-weather.csv"
STOCKS_CSV = EXAMPLES / "data" / "stocks.csv"


def ctx(node: str = "n") -> Any:
    """A stand-in for the engine's Context, for handlers that touch no database."""
    return SimpleNamespace(run_id="run-1", node=node, attempt=1, upstream=lambda name: None)


def weather_csv(*rows: str) -> io.StringIO:
    return io.StringIO("date,precipitation,temp_max,temp_min,wind,weather\n" + "\n".join(rows))


def stocks_csv(*rows: str) -> io.StringIO:
    return io.StringIO("symbol,date,price\n" + "\n".join(rows))


# --- data files ------------------------------------------------------------------------------


def test_data_dir_is_examples_data() -> None:
    assert (EXAMPLES / "data").resolve() == DATA_DIR
    assert data_file("seattle-weather.csv") == DATA_DIR / "seattle-weather.csv"


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("../pyproject.toml", "path separators"),
        ("..", "'..'"),
        (".", "'.'"),
        ("/etc/passwd", "absolute path"),
        ("\\windows\\win.ini", "absolute path"),
        ("C:stocks.csv", "absolute path"),
        ("data/stocks.csv", "path separators"),
        ("..\\stocks.csv", "path separators"),
        (".hidden.csv", "hidden"),
        ("", "non-empty string"),
        (None, "non-empty string"),
        (42, "non-empty string"),
        ("stocks.csv\x00", "NUL"),
    ],
)
def test_data_file_rejects_paths(name: Any, problem: str) -> None:
    with pytest.raises(ValueError, match="data file name") as info:
        data_file(name)
    assert problem in str(info.value)


def test_data_file_missing_lists_available() -> None:
    with pytest.raises(FileNotFoundError, match=r"stocks\.csv"):
        data_file("nope.csv")


def test_load_handlers_reject_traversal_from_input() -> None:
    with pytest.raises(ValueError, match="path separators"):
        weather.load_daily(ctx(), {"file": "../../pyproject.toml"})
    with pytest.raises(ValueError, match="absolute path"):
        stocks.load_prices(ctx(), {"file": str(STOCKS_CSV)})


# --- weather ---------------------------------------------------------------------------------


def test_parse_daily_normalises_and_sorts() -> None:
    rows = weather.parse_daily(
        weather_csv("2012/01/02,1.5,10.0,2.0,4.0,rain", "2012/01/01,0.0,12.8,5.0,4.7,drizzle")
    )
    assert rows == [
        ["2012-01-01", 0.0, 12.8, 5.0, 4.7, "drizzle"],
        ["2012-01-02", 1.5, 10.0, 2.0, 4.0, "rain"],
    ]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("2012/13/01,0,1,0,1,sun", "line 2: date"),
        ("2012/01/01,x,1,0,1,sun", "line 2: precipitation is not a number"),
        ("2012/01/01,nan,1,0,1,sun", "not finite"),
        ("2012/01/01,-1,1,0,1,sun", "must not be negative"),
        ("2012/01/01,0,1,5,1,sun", "above temp_max"),
        ("2012/01/01,0,1,0,1,hail", "unknown weather"),
        ("2012/01/01,0,1,0,1", "expected 6 fields"),
    ],
)
def test_parse_daily_rejects_bad_rows(row: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        weather.parse_daily(weather_csv(row))


def test_parse_daily_rejects_header_duplicates_and_empty() -> None:
    with pytest.raises(ValueError, match="expected header"):
        weather.parse_daily(io.StringIO("day,rain\n2012/01/01,0\n"))
    with pytest.raises(ValueError, match="line 3: duplicate date 2012-01-01"):
        weather.parse_daily(weather_csv("2012/01/01,0,1,0,1,sun", "2012/01/01,0,1,0,1,sun"))
    with pytest.raises(ValueError, match="no data rows"):
        weather.parse_daily(weather_csv())


def test_monthly_aggregates_hand_made() -> None:
    rows = [
        ["2012-01-01", 0.0, 10.0, 2.0, 3.0, "sun"],
        ["2012-01-02", 5.5, 11.0, 3.0, 7.5, "rain"],
        ["2012-01-03", 1.25, 12.5, 4.5, 2.0, "rain"],
        ["2012-02-01", 0.0, 8.0, -1.0, 1.0, "sun"],
        ["2012-02-02", 0.0, 9.0, 0.0, 1.0, "fog"],
    ]
    assert weather.monthly_aggregates(rows) == [
        {
            "month": "2012-01",
            "days": 3,
            "temp_max_mean": 11.17,
            "temp_min_mean": 3.17,
            "precipitation_mm": 6.75,
            "wind_max": 7.5,
            "weather": "rain",
        },
        {
            "month": "2012-02",
            "days": 2,
            "temp_max_mean": 8.5,
            "temp_min_mean": -0.5,
            "precipitation_mm": 0.0,
            "wind_max": 1.0,
            "weather": "fog",  # tie between fog and sun: alphabetical
        },
    ]


def test_monthly_aggregates_rejects_wrong_rows() -> None:
    with pytest.raises(ValueError, match="expected rows of 6 values"):
        weather.monthly_aggregates([["2012-01-01", 1.0]])


def test_month_rows_are_exact_decimals() -> None:
    months = weather.monthly_aggregates([["2012-01-01", 0.1, 10.35, 2.0, 3.0, "sun"]])
    assert weather.month_rows("r", "store", months) == [
        (
            "r",
            "store",
            "2012-01",
            1,
            Decimal("10.35"),
            Decimal("2.0"),
            Decimal("0.1"),
            Decimal("3.0"),
            "sun",
        ),
    ]


def test_summarise_hand_made() -> None:
    months = [
        {
            "month": "2012-01",
            "days": 31,
            "temp_max_mean": 7.0,
            "temp_min_mean": 1.5,
            "precipitation_mm": 170.0,
            "wind_max": 9.5,
            "weather": "rain",
        },
        {
            "month": "2012-02",
            "days": 29,
            "temp_max_mean": 9.0,
            "temp_min_mean": 0.5,
            "precipitation_mm": 10.0,
            "wind_max": 8.0,
            "weather": "sun",
        },
        {
            "month": "2012-03",
            "days": 31,
            "temp_max_mean": 11.0,
            "temp_min_mean": 2.0,
            "precipitation_mm": 50.0,
            "wind_max": 6.0,
            "weather": "rain",
        },
    ]
    assert weather.summarise(months) == {
        "months": 3,
        "days": 91,
        "first_month": "2012-01",
        "last_month": "2012-03",
        "wettest_month": {"month": "2012-01", "precipitation_mm": 170.0},
        "driest_month": {"month": "2012-02", "precipitation_mm": 10.0},
        "hottest_month": {"month": "2012-03", "temp_max_mean": 11.0},
        "coldest_month": {"month": "2012-02", "temp_min_mean": 0.5},
        "windiest_month": {"month": "2012-01", "wind_max": 9.5},
        "weather_months": {"rain": 2, "sun": 1},
    }
    with pytest.raises(ValueError, match="no months"):
        weather.summarise([])


def test_weather_real_file_figures() -> None:
    """Figures of the real CSV, computed independently with the csv module."""
    with WEATHER_CSV.open(newline="") as f:
        raw = list(csv.DictReader(f))
    expected_months = {r["date"][:7].replace("/", "-") for r in raw}
    july_2015 = [r for r in raw if r["date"].startswith("2015/07/")]

    loaded = weather.load_daily(ctx("load"), {"file": None})
    assert loaded["file"] == "seattle-weather.csv"
    assert loaded["days"] == len(raw) == 1461
    assert (loaded["first_day"], loaded["last_day"]) == ("2012-01-01", "2015-12-31")
    assert len(json.dumps(loaded)) < 1024 * 1024

    months = weather.monthly(ctx("monthly"), {"rows": loaded["rows"]})["months"]
    assert len(months) == len(expected_months) == 48
    assert sum(m["days"] for m in months) == 1461
    july = next(m for m in months if m["month"] == "2015-07")
    assert july["days"] == 31
    assert july["precipitation_mm"] == round(sum(float(r["precipitation"]) for r in july_2015), 2)
    assert july["temp_max_mean"] == round(
        statistics.fmean(float(r["temp_max"]) for r in july_2015), 2
    )
    assert july["wind_max"] == max(float(r["wind"]) for r in july_2015)
    assert july["weather"] == Counter(r["weather"] for r in july_2015).most_common(1)[0][0]

    out = weather.summary(
        ctx("summary"), {"file": "seattle-weather.csv", "months": months, "stored": 48}
    )
    assert out["months"] == 48 and out["days"] == 1461 and out["stored_rows"] == 48
    by_month: dict[str, float] = {}
    for r in raw:
        key = r["date"][:7].replace("/", "-")
        by_month[key] = by_month.get(key, 0.0) + float(r["precipitation"])
    wettest = max(by_month, key=lambda k: by_month[k])
    assert out["wettest_month"] == {
        "month": wettest,
        "precipitation_mm": round(by_month[wettest], 2),
    }
    json.dumps(out)


def test_weather_default_file_when_input_missing() -> None:
    assert weather.load_daily(ctx(), None)["days"] == 1461
    assert weather.load_daily(ctx(), {})["days"] == 1461


# --- stocks ----------------------------------------------------------------------------------


def test_parse_prices_hand_made() -> None:
    series = stocks.parse_prices(
        stocks_csv("B,Feb 1 2000,110", "B,Jan 1 2000,100", "A,Dec 1 1999,5", "A,Jan 1 2000,4")
    )
    assert series == {
        "A": [["1999-12", 5.0], ["2000-01", 4.0]],
        "B": [["2000-01", 100.0], ["2000-02", 110.0]],
    }


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (("A,Jan 1 2000,0",), "price must be positive"),
        (("A,2000-01-01,1",), "date is not like"),
        (("A,Foo 1 2000,1",), "date is not like"),
        ((",Jan 1 2000,1",), "empty symbol"),
        (("A,Jan 1 2000,1", "A,Jan 15 2000,2"), "line 3: duplicate month 2000-01 for A"),
        (("A,Jan 1 2000,1", "A,Mar 1 2000,2"), "months missing between 2000-01 and 2000-03"),
    ],
)
def test_parse_prices_rejects(rows: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        stocks.parse_prices(stocks_csv(*rows))


def test_returns_by_symbol_hand_made() -> None:
    series = {
        "A": [["2000-01", 100.0], ["2000-02", 110.0], ["2000-03", 99.0]],
        "B": [["2000-01", 7]],
    }
    out = stocks.returns_by_symbol(series)
    assert out["monthly"] == {"A": [["2000-02", 10.0], ["2000-03", -10.0]], "B": []}
    assert out["summary"]["A"] == {
        "first_month": "2000-01",
        "last_month": "2000-03",
        "months": 2,
        "total_return_pct": -1.0,
        "mean_monthly_return_pct": 0.0,
        "best_month": {"month": "2000-02", "return_pct": 10.0},
        "worst_month": {"month": "2000-03", "return_pct": -10.0},
    }
    assert out["summary"]["B"]["months"] == 0
    assert out["summary"]["B"]["mean_monthly_return_pct"] is None


def test_annualised_volatility() -> None:
    prices = [100.0, 110.0, 99.0, 104.0]
    logs = [math.log(110 / 100), math.log(99 / 110), math.log(104 / 99)]
    expected = round(statistics.stdev(logs) * math.sqrt(12) * 100, 2)
    assert stocks.annualised_volatility(prices) == expected
    assert stocks.annualised_volatility([100.0, 100.0, 100.0]) == 0.0
    assert stocks.annualised_volatility([1.0, 2.0]) is None


def test_build_report_joins_and_ranks() -> None:
    summary = {"A": {"months": 2}, "B": {"months": 3}, "C": {"months": 0}}
    vol = {
        "A": {"months": 2, "annualised_volatility_pct": 30.0},
        "B": {"months": 3, "annualised_volatility_pct": 12.5},
        "C": {"months": 0, "annualised_volatility_pct": None},
    }
    out = stocks.build_report(summary, vol)
    assert [r["symbol"] for r in out["symbols"]] == ["A", "B", "C"]
    assert out["symbols"][1] == {"symbol": "B", "months": 3, "annualised_volatility_pct": 12.5}
    assert (out["most_volatile"], out["least_volatile"]) == ("A", "B")
    with pytest.raises(ValueError, match=r"disagree on symbols: \['C'\]"):
        stocks.build_report(summary, {k: v for k, v in vol.items() if k != "C"})


def test_stocks_real_file_figures() -> None:
    with STOCKS_CSV.open(newline="") as f:
        raw = list(csv.DictReader(f))
    counts = Counter(r["symbol"] for r in raw)

    loaded = stocks.load_prices(ctx("load"), {})
    assert loaded["rows"] == len(raw) == 560
    assert loaded["symbols"] == sorted(counts) == ["AAPL", "AMZN", "GOOG", "IBM", "MSFT"]
    assert {s: len(v) for s, v in loaded["series"].items()} == dict(counts)
    assert loaded["series"]["GOOG"][0][0] == "2004-08"

    msft = [float(r["price"]) for r in raw if r["symbol"] == "MSFT"]
    returns = stocks.monthly_returns(ctx("returns"), {"series": loaded["series"]})
    assert returns["monthly"]["MSFT"][0] == ["2000-02", round((msft[1] / msft[0] - 1) * 100, 2)]
    assert returns["summary"]["MSFT"]["months"] == 122
    assert returns["summary"]["MSFT"]["total_return_pct"] == round(
        (msft[-1] / msft[0] - 1) * 100, 2
    )

    vol = stocks.volatility(ctx("volatility"), {"series": loaded["series"]})["volatility"]
    logs = [math.log(b / a) for a, b in itertools.pairwise(msft)]
    assert vol["MSFT"]["annualised_volatility_pct"] == round(
        statistics.stdev(logs) * math.sqrt(12) * 100, 2
    )
    assert vol["GOOG"]["months"] == counts["GOOG"] - 1

    report = stocks.build_report(returns["summary"], vol)
    assert len(report["symbols"]) == 5
    assert report["most_volatile"] in counts
    assert len(json.dumps(returns)) < 1024 * 1024


# --- demo ------------------------------------------------------------------------------------


def test_demo_greet_and_shout() -> None:
    assert demo.greet(ctx(), {"name": "Ada"}) == {"greeting": "Hello, Ada!"}
    assert demo.greet(ctx(), None) == {"greeting": "Hello, world!"}
    assert demo.greet(ctx(), {}) == {"greeting": "Hello, world!"}
    assert demo.shout(ctx(), {"text": "Hello, Ada!"}) == {
        "message": "HELLO, ADA!",
        "run_id": "run-1",
        "attempt": 1,
    }
    with pytest.raises(ValueError, match="name must be"):
        demo.greet(ctx(), {"name": ""})
    with pytest.raises(ValueError, match="'text'"):
        demo.shout(ctx(), {})

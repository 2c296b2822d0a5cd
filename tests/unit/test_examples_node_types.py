"""Pure transforms of the node-type examples (csv_profile, approval): no database."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

import pytest
from cyclone_examples import approval, csv_profile
from cyclone_examples.stocks import parse_prices
from helpers.paths import EXAMPLES


def ctx() -> Any:
    return SimpleNamespace(run_id="run-1", node="n", attempt=1)


def test_profile_lines_numbers_and_text() -> None:
    text = "a,b,c\n1,x,\n2.5,y,7\n3,x,8\n"
    profile = csv_profile.profile_lines("t.csv", io.StringIO(text))
    assert profile["rows"] == 3 and profile["columns"] == ["a", "b", "c"]
    assert profile["profile"]["a"] == {"kind": "number", "min": 1.0, "max": 3.0, "mean": 2.167}
    assert profile["profile"]["b"] == {
        "kind": "text",
        "distinct": 2,
        "most_common": "x",
        "most_common_count": 2,
    }
    assert profile["profile"]["c"]["mean"] == 7.5  # empty cells are skipped


def test_profile_lines_rejects_ragged_rows_and_empty_files() -> None:
    with pytest.raises(ValueError, match="line 3: expected 2 fields, got 3"):
        csv_profile.profile_lines("t.csv", io.StringIO("a,b\n1,2\n1,2,3\n"))
    with pytest.raises(ValueError, match="no header"):
        csv_profile.profile_lines("t.csv", io.StringIO(""))


def test_real_data_files_profile() -> None:
    assert csv_profile.list_files(ctx(), None) == {"files": ["seattle-weather.csv", "stocks.csv"]}
    weather = csv_profile.profile_file(ctx(), "seattle-weather.csv")
    assert weather["rows"] == 1461
    assert weather["profile"]["weather"]["most_common"] == "sun"
    assert weather["profile"]["temp_max"]["max"] == 35.6
    stocks = csv_profile.profile_file(ctx(), {"file": "stocks.csv"})
    assert stocks["rows"] == 560 and stocks["profile"]["symbol"]["distinct"] == 5
    with pytest.raises(ValueError, match="path separators"):
        csv_profile.profile_file(ctx(), "../flows/hello.yaml")


def test_combine_and_describe() -> None:
    profiles = [
        {"file": "a.csv", "rows": 2, "columns": ["x"], "profile": {}},
        {"file": "b.csv", "rows": 5, "columns": ["x", "y"], "profile": {}},
    ]
    assert csv_profile.combine_profiles(profiles) == {
        "files": 2,
        "rows": 7,
        "largest": "b.csv",
        "per_file": [
            {"file": "a.csv", "rows": 2, "columns": 1},
            {"file": "b.csv", "rows": 5, "columns": 2},
        ],
    }
    assert csv_profile.combine_profiles([])["files"] == 0
    profile = csv_profile.profile_lines("t.csv", io.StringIO("n,s\n1,a\n3,a\n"))
    assert csv_profile.describe_profile(profile) == [
        "t.csv: 2 rows",
        "n: 1.0 .. 3.0 (mean 2.0)",
        "s: 1 distinct, most common 'a' (2x)",
    ]


def test_yearly_averages_of_the_stocks_file() -> None:
    series = parse_prices(io.StringIO((EXAMPLES / "data" / "stocks.csv").read_text()))
    report = approval.yearly_averages(series, 2004)
    assert set(report["averages"]) == {"AAPL", "AMZN", "GOOG", "IBM", "MSFT"}
    assert report["months"]["GOOG"] == 5  # GOOG listed from August 2004
    assert report["months"]["IBM"] == 12
    with pytest.raises(ValueError, match="no prices in 1999"):
        approval.yearly_averages(series, 1999)
    assert approval.draft(ctx(), {"year": 2004}) == report


def test_approval_payloads() -> None:
    assert approval.approval_of({"by": "ada"}) == ("ada", None)
    assert approval.approval_of({"by": "ada", "note": "fine", "approved": True}) == ("ada", "fine")
    with pytest.raises(PermissionError, match="rejected by bob: too early"):
        approval.approval_of({"by": "bob", "approved": False, "note": "too early"})
    with pytest.raises(ValueError, match="needs a 'by' name"):
        approval.approval_of({"approved": True})

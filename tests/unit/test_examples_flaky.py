"""The failure-handling example's handlers and transforms (examples/cyclone_examples/flaky.py)
without a database: the simulated outage, the hanging attempt, the strict check."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from cyclone_examples import flaky

from cyclone_flow import PermanentError


def ctx(attempt: int = 1, cancelled: bool = False) -> Any:
    event = threading.Event()
    if cancelled:
        event.set()
    return SimpleNamespace(
        run_id="run-1",
        node="n",
        attempt=attempt,
        cancelled=event.is_set,
        wait_cancelled=event.wait,
    )


SERIES = {
    "AAA": [[f"2000-{m:02d}", float(m)] for m in range(1, 13)] + [["2001-01", 26.0]],
    "BBB": [["2000-03", 10.0], ["2000-04", 5.0]],
}


def test_latest_by_symbol_and_twelve_month_change() -> None:
    assert flaky.latest_by_symbol(SERIES) == {
        "AAA": {"month": "2001-01", "price": 26.0, "change_12m_pct": 2500.0},
        "BBB": {"month": "2000-04", "price": 5.0, "change_12m_pct": None},
    }
    with pytest.raises(ValueError, match="CCC: no prices"):
        flaky.latest_by_symbol({"CCC": []})


def test_late_starters_and_ranking() -> None:
    assert flaky.late_starters(SERIES) == {"BBB": 2}
    assert flaky.late_starters({"AAA": SERIES["AAA"]}) == {}
    assert flaky.late_starters({}) == {}
    assert flaky.rank_by_total_return(SERIES) == [
        {"symbol": "AAA", "total_return_pct": 2500.0},
        {"symbol": "BBB", "total_return_pct": -50.0},
    ]


def test_fetch_fails_for_the_outage_attempts_then_reads_the_real_file() -> None:
    for attempt in (1, 2):
        with pytest.raises(ConnectionError, match=f"attempt {attempt} of the 2 that fail"):
            flaky.fetch_prices(ctx(attempt), {"file": None, "outage_attempts": 2})
    out = flaky.fetch_prices(ctx(3), {"file": None, "outage_attempts": 2})
    assert (out["file"], out["attempt"]) == ("stocks.csv", 3)
    assert sorted(out["symbols"]) == ["AAPL", "AMZN", "GOOG", "IBM", "MSFT"]
    assert out["series"]["GOOG"][0] == ["2004-08", 102.37]


def test_latest_hangs_on_its_first_attempt_until_told() -> None:
    with pytest.raises(TimeoutError, match="did not answer"):
        flaky.latest_prices(ctx(1, cancelled=True), {"series": SERIES, "hang_first": True})
    out = flaky.latest_prices(ctx(2), {"series": SERIES, "hang_first": True})
    assert out["attempt"] == 2 and out["latest"]["BBB"]["price"] == 5.0
    assert flaky.latest_prices(ctx(1), {"series": SERIES, "hang_first": False})["attempt"] == 1


def test_full_history_is_a_permanent_failure_on_the_real_file() -> None:
    series = flaky.fetch_prices(ctx(1), {"file": None, "outage_attempts": 0})["series"]
    with pytest.raises(PermanentError, match="GOOG starts 55 months late"):
        flaky.full_history(ctx(), {"series": series})
    assert flaky.full_history(ctx(), {"series": {"AAA": SERIES["AAA"]}}) == {"symbols": 1}


def test_report_ranks_by_twelve_month_change() -> None:
    latest = flaky.latest_by_symbol(SERIES)
    out = flaky.report(ctx(), {"latest": latest, "feed_attempt": 3, "quote_attempt": 2})
    assert out["symbols"] == ["AAA", "BBB"]
    assert (out["feed_attempt"], out["quote_attempt"]) == (3, 2)

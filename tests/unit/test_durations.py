from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cyclone_flow.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("2d", 172800.0),
        ("1.5h", 5400.0),
        ("1m500ms", 60.5),
        (30, 30.0),
        (1.25, 1.25),
        (0, 0.0),
    ],
)
def test_parse(text: str | int | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "bad", ["", "5", "5 m", "m", "-1s", "1x", "1h 30m", -1, True, float("nan")]
)
def test_parse_rejects_with_value_error(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (0.5, "500ms"), (5400, "1h30m"), (90061.5, "1d1h1m1s500ms")]
)
def test_format(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=0, max_value=10**10))
def test_format_round_trips_milliseconds(ms: int) -> None:
    assert round(parse_duration(format_duration(ms / 1000)) * 1000) == ms

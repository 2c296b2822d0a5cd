from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cyclone_flow.durations import format_duration, format_span, parse_duration


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


def test_parse_max_s_bounds_with_a_clear_value_error() -> None:
    from cyclone_flow.durations import MAX_FLOW_DURATION_S

    assert MAX_FLOW_DURATION_S == 366 * 86400
    assert parse_duration("366d", max_s=MAX_FLOW_DURATION_S) == MAX_FLOW_DURATION_S
    assert parse_duration(31622400, max_s=MAX_FLOW_DURATION_S) == MAX_FLOW_DURATION_S
    for bad in ("366d1ms", "99999999999d", 31622401, 1e300):
        with pytest.raises(ValueError, match="longer than the maximum of 366d"):
            parse_duration(bad, max_s=MAX_FLOW_DURATION_S)
    with pytest.raises(ValueError, match=r"'2m': longer than the maximum of 1m"):
        parse_duration("2m", max_s=60)
    assert parse_duration("99999999999d") == 99999999999 * 86400.0  # unbounded by default


@pytest.mark.parametrize("huge", [10**400, "9" * 400 + "d"])
def test_parse_too_large_is_a_value_error(huge: object) -> None:
    with pytest.raises(ValueError, match="too large"):
        parse_duration(huge)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "seconds"), [("30", 30.0), ("0", 0.0), ("1.5", 1.5), ("1h30m", 5400.0)]
)
def test_parse_arg_reads_a_bare_number_as_seconds(text: str, seconds: float) -> None:
    from cyclone_flow.durations import parse_duration_arg

    assert parse_duration_arg(text) == seconds


@pytest.mark.parametrize("bad", ["", "-1", "1e3", " 30", "30 ", "inf", "9" * 400, "400d"])
def test_parse_arg_rejects_with_value_error(bad: str) -> None:
    from cyclone_flow.durations import MAX_FLOW_DURATION_S, parse_duration_arg

    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration_arg(bad, max_s=MAX_FLOW_DURATION_S)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-1.0, "0 ms"),
        (0.85, "850 ms"),
        (12.34, "12.3 s"),
        (307.9, "5 min 07 s"),
        (7380.0, "2 h 03 min"),
        (273600.0, "3 d 04 h"),
    ],
)
def test_format_span_is_the_dashboards_format(seconds: float, text: str) -> None:
    assert format_span(seconds) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-1.0, "0ms"),
        (0.85, "850ms"),
        (12.34, "12.3s"),
        (245.9, "4m05s"),
        (7380.0, "2h03m"),
    ],
)
def test_format_elapsed_is_a_deprecated_alias_keeping_the_old_style(
    seconds: float, text: str
) -> None:
    from cyclone_flow import durations

    assert "format_elapsed" in durations.__all__
    with pytest.warns(DeprecationWarning, match="format_span"):
        assert durations.format_elapsed(seconds) == text

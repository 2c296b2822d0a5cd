"""Cron tick arithmetic across DST changes (croniter + zoneinfo), and submission options."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cyclone_flow.errors import SubmitOptionError
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.options import job_flow, run_options
from cyclone_flow.schedules import Ticks, default_schedule_name, flow_schedules


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_hourly_ticks_across_fall_back_fire_in_both_repeated_hours() -> None:
    # Europe/Paris: 2024-10-27 03:00 CEST -> 02:00 CET; 02:30 happens twice
    ticks = list(
        Ticks("30 * * * *", "Europe/Paris").between(utc(2024, 10, 26, 22), utc(2024, 10, 27, 3))
    )
    assert ticks == [
        utc(2024, 10, 26, 22, 30),
        utc(2024, 10, 26, 23, 30),
        utc(2024, 10, 27, 0, 30),
        utc(2024, 10, 27, 1, 30),
        utc(2024, 10, 27, 2, 30),
    ]


def test_daily_tick_in_the_repeated_hour_fires_once() -> None:
    ticks = list(Ticks("30 2 * * *", "Europe/Paris").between(utc(2024, 10, 25), utc(2024, 10, 29)))
    assert ticks == [
        utc(2024, 10, 25, 0, 30),
        utc(2024, 10, 26, 0, 30),
        utc(2024, 10, 27, 0, 30),  # the first 02:30 (CEST) only
        utc(2024, 10, 28, 1, 30),
    ]


def test_spring_forward_skipped_wall_time_fires_once_after_the_gap() -> None:
    # 2024-03-31 02:00 CET -> 03:00 CEST: 02:30 does not exist
    daily = list(Ticks("30 2 * * *", "Europe/Paris").between(utc(2024, 3, 30), utc(2024, 4, 1, 12)))
    assert daily == [utc(2024, 3, 30, 1, 30), utc(2024, 3, 31, 1, 0), utc(2024, 4, 1, 0, 30)]
    hourly = list(
        Ticks("30 * * * *", "Europe/Paris").between(utc(2024, 3, 30, 23), utc(2024, 3, 31, 2))
    )
    # every real hour once: 00:30 CET, 01:30 CET, then 03:30 CEST (= 01:30Z)
    assert hourly == [utc(2024, 3, 30, 23, 30), utc(2024, 3, 31, 0, 30), utc(2024, 3, 31, 1, 30)]


def test_at_or_before_and_after() -> None:
    t = Ticks("*/5 * * * *")
    assert t.at_or_before(utc(2024, 1, 1, 10, 7)) == utc(2024, 1, 1, 10, 5)
    assert t.at_or_before(utc(2024, 1, 1, 10, 5)) == utc(2024, 1, 1, 10, 5)
    assert t.after(utc(2024, 1, 1, 10, 5)) == utc(2024, 1, 1, 10, 10)
    fixed = Ticks("30 2 * * *", "Europe/Paris")
    # just after the second (skipped) 02:30 of the fall-back night: the first one counts
    assert fixed.at_or_before(utc(2024, 10, 27, 1, 45)) == utc(2024, 10, 27, 0, 30)


def _hours(day: datetime, first: int, last: int) -> list[datetime]:
    return [day.replace(hour=h) for h in range(first, last + 1)]


# (zone, local day, its UTC start and end): ordinary days, then Berlin's DST days of 2027
# (28 March: 02:00 CET -> 03:00 CEST, 23 hours; 31 October: 03:00 CEST -> 02:00 CET, 25 hours)
_UTC_DAY = ("UTC", utc(2027, 3, 28), utc(2027, 3, 29))
_SPRING = ("Europe/Berlin", utc(2027, 3, 27, 23), utc(2027, 3, 28, 22))
_AUTUMN = ("Europe/Berlin", utc(2027, 10, 30, 22), utc(2027, 10, 31, 23))
_SUMMER = ("Europe/Berlin", utc(2027, 6, 13, 22), utc(2027, 6, 14, 22))
_KOLKATA = ("Asia/Kolkata", utc(2027, 3, 27, 18, 30), utc(2027, 3, 28, 18, 30))  # no DST


@pytest.mark.parametrize(
    ("cron", "day", "expected"),
    [
        ("@daily", _UTC_DAY, [utc(2027, 3, 28)]),
        ("@weekly", _UTC_DAY, [utc(2027, 3, 28)]),  # a Sunday
        ("30 2 * * *", _UTC_DAY, [utc(2027, 3, 28, 2, 30)]),
        ("0 9-17 * * *", _UTC_DAY, _hours(utc(2027, 3, 28), 9, 17)),
        ("@daily", _SPRING, [utc(2027, 3, 27, 23)]),
        ("@weekly", _SPRING, [utc(2027, 3, 27, 23)]),
        ("30 2 * * *", _SPRING, [utc(2027, 3, 28, 1)]),  # 02:30 does not exist: 03:00 CEST
        ("0 9-17 * * *", _SPRING, _hours(utc(2027, 3, 28), 7, 15)),
        (  # every real hour once: 23 of them
            "30 * * * *",
            _SPRING,
            [utc(2027, 3, 27, 23, 30)]
            + [t.replace(minute=30) for t in _hours(utc(2027, 3, 28), 0, 21)],
        ),
        (  # every real hour once: 25 of them, 02:30 twice
            "30 * * * *",
            _AUTUMN,
            [utc(2027, 10, 30, 22, 30), utc(2027, 10, 30, 23, 30)]
            + [t.replace(minute=30) for t in _hours(utc(2027, 10, 31), 0, 22)],
        ),
        ("@daily", _AUTUMN, [utc(2027, 10, 30, 22)]),
        ("@weekly", _AUTUMN, [utc(2027, 10, 30, 22)]),
        ("30 2 * * *", _AUTUMN, [utc(2027, 10, 31, 0, 30)]),  # the first 02:30 (CEST) only
        ("0 9-17 * * *", _AUTUMN, _hours(utc(2027, 10, 31), 8, 16)),
        ("@daily", _SUMMER, [utc(2027, 6, 13, 22)]),
        ("30 2 * * *", _SUMMER, [utc(2027, 6, 14, 0, 30)]),
        ("0 9-17 * * *", _SUMMER, _hours(utc(2027, 6, 14), 7, 15)),
        ("30 2 * * *", _KOLKATA, [utc(2027, 3, 27, 21)]),
        ("0 9-17 * * *", _KOLKATA, [t.replace(minute=30) for t in _hours(utc(2027, 3, 28), 3, 11)]),
    ],
)
def test_fixed_hour_schedules_tick_once_per_wall_clock_match(
    cron: str, day: tuple[str, datetime, datetime], expected: list[datetime]
) -> None:
    """Regression (croniter 7 returns every get_prev result with fold=1, which read as "the
    repeated hour" skipped every tick of a fixed-hour cron): the ticks of one local day,
    found both forward and back."""
    zone, start, end = day
    ticks = Ticks(cron, zone)
    second = timedelta(seconds=1)
    assert list(ticks.between(start - second, end - second)) == expected
    for tick in expected:
        assert ticks.at_or_before(tick) == tick
        assert ticks.at_or_before(tick + timedelta(seconds=59)) == tick
        assert ticks.after(tick - second) == tick
    assert ticks.at_or_before(end - second) == expected[-1]


def test_searches_take_few_steps() -> None:
    """Regression: a search walked up to 100,000 croniter steps (about 10 s of CPU) before
    giving up; now a year of daily look-ups costs well under a second."""
    ticks = Ticks("30 1 * * *", "Europe/Berlin")
    started = time.process_time()
    for day in range(365):
        now = utc(2027, 1, 1, 12) + timedelta(days=day)
        assert ticks.at_or_before(now) < now < ticks.after(now)
    assert time.process_time() - started < 2.0


def test_expression_without_a_tick_is_a_submit_option_error() -> None:
    with pytest.raises(SubmitOptionError, match="no tick found"):
        Ticks("0 0 31 2 *").after(utc(2027, 1, 1))
    with pytest.raises(SubmitOptionError, match="no tick found"):
        Ticks("0 0 30 2 *", "Europe/Berlin").at_or_before(utc(2027, 1, 1))


@pytest.mark.parametrize(
    ("cron", "zone"), [("bad", "UTC"), ("61 * * * *", "UTC"), ("* * * * *", "Mars/Base")]
)
def test_bad_cron_or_zone(cron: str, zone: str) -> None:
    with pytest.raises(SubmitOptionError):
        Ticks(cron, zone)


def test_flow_schedule_names() -> None:
    one = load_flow_text("name: f\nnodes: {a: {call: 'm:f'}}\nschedules: [{cron: '@daily'}]\n")
    daily = default_schedule_name("f", "@daily", "UTC", None)
    assert re.fullmatch(r"f-[0-9a-f]{8}", daily)
    assert [(s.name, s.named) for s in flow_schedules(one)] == [(daily, False)]
    two = load_flow_text(
        "name: f\nnodes: {a: {call: 'm:f'}}\n"
        "schedules: [{cron: '@hourly', name: hourly, timezone: Europe/Paris},"
        " {cron: '@daily', timezone: UTC}]\n"
    )
    assert [(s.name, s.timezone, s.named) for s in flow_schedules(two)] == [
        ("hourly", "Europe/Paris", True),
        (daily, "UTC", False),  # by cron, timezone and input: not by position
    ]
    assert default_schedule_name("f", "@daily", "UTC", None) == default_schedule_name(
        "f", "@daily", "UTC", None
    )
    assert default_schedule_name("f", "@daily", "UTC", 1) != default_schedule_name(
        "f", "@daily", "UTC", None
    )


def test_run_options_normalise() -> None:
    opts = run_options(
        delay=timedelta(minutes=1),
        unique_key="k",
        unique_window="1h",
        unique_states={"completed", "running"},
    )
    assert (opts.delay_s, opts.unique_window_s, opts.unique_states) == (
        60.0,
        3600.0,
        ("completed", "running"),
    )
    assert opts.delayed and not run_options().delayed


def test_job_flow_is_content_addressed() -> None:
    a = job_flow("pkg.mod:fn", retry=3, timeout="30s")
    b = job_flow("pkg.mod:fn", retry={"max_attempts": 3}, timeout=30)
    assert a.digest == b.digest and a.name == "pkg.mod:fn"
    node = a.nodes["job"]
    assert (node.call, node.retry.max_attempts, node.timeout_s) == ("pkg.mod:fn", 3, 30.0)
    assert job_flow("pkg.mod:fn").digest != a.digest


def test_seconds_field_across_dst() -> None:
    """A sixth field (seconds) follows the same rule, to the second."""
    fixed = Ticks("30 2 * * * 15", "Europe/Berlin")  # 02:30:15 every day
    assert list(fixed.between(utc(2027, 3, 27), utc(2027, 3, 29))) == [
        utc(2027, 3, 27, 1, 30, 15),
        utc(2027, 3, 28, 1),  # does not exist: the first instant after the gap
    ]
    assert list(fixed.between(utc(2027, 10, 30), utc(2027, 11, 1))) == [
        utc(2027, 10, 30, 0, 30, 15),
        utc(2027, 10, 31, 0, 30, 15),  # the first occurrence only
    ]
    every = Ticks("* * * * * */20", "Europe/Berlin")  # the repeated hour twice: 2 h of UTC
    repeated = list(
        every.between(utc(2027, 10, 31, 0) - timedelta(seconds=1), utc(2027, 10, 31, 2))
    )
    assert len(repeated) == 2 * 60 * 3 + 1 == len(set(repeated))
    assert every.at_or_before(utc(2027, 10, 31, 1, 0, 5)) == utc(2027, 10, 31, 1)
    assert every.after(utc(2027, 10, 31, 0, 59, 59)) == utc(2027, 10, 31, 1)


def test_instants_in_any_zone_give_the_same_ticks() -> None:
    """psycopg returns timestamptz in the session's zone: an aware instant in another zone
    is the same instant (here inside Berlin's repeated hour)."""
    ticks = Ticks("*/20 * * * *", "Europe/Berlin")
    for minutes in range(0, 150, 7):
        instant = utc(2027, 10, 30, 23, 30) + timedelta(minutes=minutes)
        elsewhere = instant.astimezone(ZoneInfo("America/New_York"))
        assert ticks.after(elsewhere) == ticks.after(instant)
        assert ticks.at_or_before(elsewhere) == ticks.at_or_before(instant)


# -- one validator for lint (E050/E051) and the API --------------------------------------

_REFUSED_CRONS = [
    "R R * * *",  # random: drawn again at each parse, so the ticks moved
    "H * * * *",  # hashed
    "0 0 1 1 * 0 2020",  # a year field: a past year never ticks
    "0 0 1 1 * 0 2027",  # ... nor once its year has passed
    "@reboot",
    "@midnight",  # a croniter alias the docs do not list
    "0 0 L * *",
    "0 9 * * 1#2",
    "0 0 1W * *",
    "0 0 ? * *",
    "0 0 * * *\n",
    "61 * * * *",
    "* * * *",
]
_ACCEPTED_CRONS = [
    "*/5 * * * *",
    "0 9-17/2 * * 1-5",
    "5/10 * * * *",
    "0 0 1,15 jan-mar MON-fri",
    "30 2 * * * 15",
    "* * * * * */20",
    *("@hourly", "@daily", "@weekly", "@monthly", "@yearly"),
]


def _lint_codes(cron: str, zone: str = "UTC") -> list[str]:
    from cyclone_flow.flowfile.load import lint_text

    entry = json.dumps({"cron": cron, "timezone": zone})  # JSON is YAML
    text = f"name: f\nnodes: {{a: {{call: 'm:f'}}}}\nschedules: [{entry}]\n"
    return [p.code for p in lint_text(text)]


@pytest.mark.parametrize("cron", _REFUSED_CRONS)
def test_croniter_extensions_are_refused_by_lint_and_the_api(cron: str) -> None:
    assert _lint_codes(cron) == ["E050"]
    with pytest.raises(SubmitOptionError, match="not a cron expression: "):
        Ticks(cron)


@pytest.mark.parametrize("cron", _ACCEPTED_CRONS)
def test_documented_expressions_are_accepted_by_lint_and_the_api(cron: str) -> None:
    assert _lint_codes(cron) == []
    Ticks(cron).after(utc(2027, 1, 1))


def test_a_random_field_would_tick_at_moving_times() -> None:
    """Why R is refused: croniter draws it again at every parse, and Ticks parses the
    expression for every scan."""
    from croniter import croniter

    firsts = {croniter("R R * * *", datetime(2027, 1, 1)).get_next(datetime) for _ in range(20)}
    assert len(firsts) > 1


@pytest.mark.parametrize(
    "zone", ["localtime", "posixrules", "Factory", "posix/Europe/Paris", "right/UTC"]
)
def test_zones_that_depend_on_the_host_are_refused_by_lint_and_the_api(zone: str) -> None:
    assert _lint_codes("@daily", zone) == ["E051"]
    with pytest.raises(SubmitOptionError, match="unknown IANA time zone"):
        Ticks("@daily", zone)


@pytest.mark.parametrize("initial", [float("nan"), float("inf"), -1])
def test_a_backoff_that_is_no_duration_says_what_it_must_be(initial: float) -> None:
    # it read "retry.backoff.initial=nan: >= 0"
    with pytest.raises(SubmitOptionError) as info:
        job_flow("pkg.mod:fn", retry={"max_attempts": 3, "backoff": {"initial": initial}})
    assert str(info.value) == (
        f"retry.backoff.initial={initial!r}: must be a finite number of seconds >= 0"
    )

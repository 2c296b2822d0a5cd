"""Cron tick arithmetic across DST changes (croniter + zoneinfo), and submission options."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cyclone_flow.errors import SubmitOptionError
from cyclone_flow.options import job_flow, run_options
from cyclone_flow.schedules import Ticks, default_schedule_name, flow_schedules
from cyclone_flow.spec import load_flow_text


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


@pytest.mark.parametrize(
    ("cron", "zone"), [("bad", "UTC"), ("61 * * * *", "UTC"), ("* * * * *", "Mars/Base")]
)
def test_bad_cron_or_zone(cron: str, zone: str) -> None:
    with pytest.raises(SubmitOptionError):
        Ticks(cron, zone)


def test_flow_schedule_names() -> None:
    one = load_flow_text("name: f\nnodes: {a: {call: 'm:f'}}\nschedules: [{cron: '@daily'}]\n")
    assert [s.name for s in flow_schedules(one)] == ["f"]
    two = load_flow_text(
        "name: f\nnodes: {a: {call: 'm:f'}}\n"
        "schedules: [{cron: '@daily'}, {cron: '@hourly', name: hourly, timezone: Europe/Paris}]\n"
    )
    assert [(s.name, s.timezone) for s in flow_schedules(two)] == [
        ("f-1", "UTC"),
        ("hourly", "Europe/Paris"),
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

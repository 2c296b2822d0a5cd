"""Ticks against an independent brute force: walk UTC minutes, read each in the zone
(zoneinfo), match the cron fields with a small matcher of its own and apply the DST rule
of docs/queues.md ("Cron schedules"). Many expressions x zones (DST of 1 h, 30 min and
at midnight, none, +12:45) x instants, most of them near a DST change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cyclone_flow.schedules import Ticks

MINUTE = timedelta(minutes=1)
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # DST of 30 minutes
    "Asia/Kolkata",  # +05:30, no DST
    "Pacific/Chatham",  # +12:45 / +13:45
    "America/Santiago",  # changes at 24:00
]
EXPRESSIONS = [
    "@daily",
    "@hourly",
    "@weekly",
    "30 1 * * *",
    "30 2 * * *",
    "0 9-17 * * *",
    "15,45 2 * * *",
    "*/20 2,3 * * *",
    "0 0 * * *",
    "45 23 * * *",
    "30 * * * *",
    "*/15 * * * *",
    "10 */3 * * *",
    "0 2 * * 0",
    "0 1-3 * * 1-5",
    "5 4 1,15 * 6",  # day-of-month OR day-of-week
    "* 2 * * *",
    "0,30 2,3 * * *",
    "59 1 * * *",
]
_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
}


def _field(spec: str, low: int, high: int) -> frozenset[int] | None:
    """The values of one cron field; None for ``*``."""
    if spec == "*":
        return None
    values: set[int] = set()
    for part in spec.split(","):
        span, _, step = part.partition("/")
        if span == "*":
            first, last = low, high
        elif "-" in span:
            first, last = (int(x) for x in span.split("-"))
        else:
            first = last = int(span)
        values.update(range(first, last + 1, int(step or 1)))
    return frozenset(values)


class BruteForce:
    """Minute-by-minute ticks of a 5-field expression in a zone."""

    def __init__(self, expr: str, zone: str) -> None:
        minute, hour, dom, month, dow = _MACROS.get(expr, expr).split()
        self.zone = ZoneInfo(zone)
        self.wildcard_hour = hour.startswith("*")
        self.minute = _field(minute, 0, 59)
        self.hour = _field(hour, 0, 23)
        self.dom = _field(dom, 1, 31)
        self.month = _field(month, 1, 12)
        dows = _field(dow, 0, 7)
        self.dow = None if dows is None else frozenset(d % 7 for d in dows)

    def matches(self, wall: datetime) -> bool:
        for allowed, value in (
            (self.minute, wall.minute),
            (self.hour, wall.hour),
            (self.month, wall.month),
        ):
            if allowed is not None and value not in allowed:
                return False
        dom_ok = self.dom is None or wall.day in self.dom
        dow_ok = self.dow is None or wall.isoweekday() % 7 in self.dow
        if self.dom is not None and self.dow is not None:
            return dom_ok or dow_ok  # Vixie cron: both restricted means either
        return dom_ok and dow_ok

    def fires(self, minute: datetime, previous: datetime | None = None) -> bool:
        """Whether the UTC ``minute`` is a tick (``previous``: the wall time of the minute
        before, when the caller has it)."""
        local = minute.astimezone(self.zone)
        wall = local.replace(tzinfo=None)
        if self.matches(wall) and (local.fold == 0 or self.wildcard_hour):
            return True  # fold=1: the second occurrence of a repeated wall time
        if self.wildcard_hour:
            return False  # a wall time in a gap is no real hour: nothing fires
        if previous is None:
            previous = (minute - MINUTE).astimezone(self.zone).replace(tzinfo=None)
        skipped = previous + MINUTE
        while skipped < wall:  # the wall times a gap just before this minute skipped
            if self.matches(skipped):
                return True  # fires once, at the first instant after the gap
            skipped += MINUTE
        return False

    def _wall(self, minute: datetime) -> datetime:
        return minute.astimezone(self.zone).replace(tzinfo=None)

    def after(self, instant: datetime, limit: int = 9 * 24 * 60) -> datetime:
        minute = instant.replace(second=0, microsecond=0) + MINUTE
        previous = self._wall(minute - MINUTE)
        for _ in range(limit):
            if self.fires(minute, previous):
                return minute
            previous = self._wall(minute)
            minute += MINUTE
        raise AssertionError("no tick within the window")

    def at_or_before(self, instant: datetime, limit: int = 9 * 24 * 60) -> datetime:
        minute = instant.replace(second=0, microsecond=0)
        for _ in range(limit):
            if self.fires(minute):
                return minute
            minute -= MINUTE
        raise AssertionError("no tick within the window")


@cache
def transitions(zone: str) -> list[datetime]:
    """The UTC instants (to the minute) at which ``zone`` changes offset in 2025-2029."""
    tz = ZoneInfo(zone)
    out = []
    at = datetime(2025, 1, 1, tzinfo=UTC)
    step = timedelta(hours=6)
    while at.year < 2030:
        if at.astimezone(tz).utcoffset() != (at + step).astimezone(tz).utcoffset():
            lo, hi = at, at + step
            while hi - lo > MINUTE:
                mid = lo + (hi - lo) / 2
                mid = mid.replace(second=0, microsecond=0)
                if mid.astimezone(tz).utcoffset() == lo.astimezone(tz).utcoffset():
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
        at += step
    return out


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, datetime]:
    zone = draw(st.sampled_from(ZONES))
    expr = draw(st.sampled_from(EXPRESSIONS))
    near = transitions(zone)
    if near and draw(st.booleans()):  # within a day of a DST change, to the second
        base = draw(st.sampled_from(near))
        instant = base + timedelta(seconds=draw(st.integers(-86_400, 86_400)))
    else:
        start = datetime(2025, 1, 1, tzinfo=UTC)
        instant = start + timedelta(seconds=draw(st.integers(0, 5 * 365 * 86_400)))
    if draw(st.booleans()):
        instant = instant.replace(second=0)  # on a minute: ties with ticks
    return expr, zone, instant


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(cases())
def test_ticks_match_a_brute_force_minute_walk(case: tuple[str, str, datetime]) -> None:
    expr, zone, instant = case
    ticks, brute = Ticks(expr, zone), BruteForce(expr, zone)
    assert ticks.after(instant) == brute.after(instant), (expr, zone, instant)
    assert ticks.at_or_before(instant) == brute.at_or_before(instant), (expr, zone, instant)


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_every_tick_around_each_2027_dst_change(expr: str, zone: str) -> None:
    """Every tick within 6 hours of each DST change of 2027 (and of two ordinary
    days in zones without DST), walked with ``between``, is the brute force's list."""
    brute = BruteForce(expr, zone)
    ticks = Ticks(expr, zone)
    near = [t for t in transitions(zone) if t.year == 2027] or [
        datetime(2027, 3, 28, tzinfo=UTC),
        datetime(2027, 10, 31, tzinfo=UTC),
    ]
    for change in near:
        start, end = change - timedelta(hours=6), change + timedelta(hours=6)
        expected, minute = [], start.replace(second=0) + MINUTE
        previous = brute._wall(minute - MINUTE)
        while minute <= end:
            if brute.fires(minute, previous):
                expected.append(minute)
            previous = brute._wall(minute)
            minute += MINUTE
        assert list(ticks.between(start, end)) == expected, (expr, zone, change)
        for tick in expected:
            assert ticks.at_or_before(tick) == tick
            assert ticks.at_or_before(tick + timedelta(seconds=59)) == tick

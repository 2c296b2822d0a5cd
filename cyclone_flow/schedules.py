"""Cron schedules, the pure parts: tick arithmetic (croniter + zoneinfo), the validation of
cron expressions, time zones and schedule names, and the ``schedules:`` of a flow file
(seeds: schedule options). The schedule scanner that submits the ticks is a maintenance
service, :mod:`cyclone_flow.maintenance.scheduler`.

Ticks
    A cron expression (5 fields, or 6 with seconds last, or ``@hourly``-style macros) is
    read in the wall-clock time of its IANA ``timezone`` (default ``UTC``). Across DST
    (decided from the zone's UTC offsets, whatever croniter version is installed): an
    expression with a fixed hour field (``2``, ``9-17``, ``@daily``) fires once per
    matching wall-clock time: a time that does not exist (spring forward) fires once at
    the first instant after the gap, a time that repeats (fall back) only at its first
    occurrence. An expression whose hour field is a wildcard (``*``, ``*/2``) follows the
    real hours: the skipped hour has no tick, the repeated hour ticks in both occurrences.
    Ticks are stored as UTC instants.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from cyclone_flow.cron import cron_problem
from cyclone_flow.errors import SubmitOptionError
from cyclone_flow.flowfile.model import Flow
from cyclone_flow.names import schedule_default_name
from cyclone_flow.text import zone_info

__all__ = [
    "ScheduleSpec",
    "SyncResult",
    "Ticks",
    "default_schedule_name",
    "flow_schedules",
    "validate_cron",
    "validate_schedule_name",
    "validate_timezone",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
_SECOND = timedelta(seconds=1)
_MAX_STEPS = 10_000  # croniter steps per search: a few are needed, this is a safety net


def validate_cron(expr: object) -> str:
    """Return ``expr`` when it is a cron expression cyclone-flow accepts (the check lint's
    E050 makes: :func:`cyclone_flow.cron.cron_problem`); raise :class:`SubmitOptionError`
    naming the problem."""
    problem = cron_problem(expr)
    if problem is not None:
        raise SubmitOptionError(
            "cron",
            expr,
            f"not a cron expression: {problem}; e.g. '*/5 * * * *' (5 fields 'minute hour "
            "day month weekday', a 6th for seconds), or @hourly/@daily/@weekly/@monthly/@yearly",
        )
    assert isinstance(expr, str)
    return expr


def validate_timezone(name: object) -> ZoneInfo:
    """The IANA zone ``name`` (e.g. ``Europe/Paris``); raise :class:`SubmitOptionError`."""
    if not isinstance(name, str) or not name:
        raise SubmitOptionError("timezone", name, "must be an IANA time zone name")
    zone = zone_info(name)
    if zone is None:
        raise SubmitOptionError("timezone", name, "unknown IANA time zone (e.g. UTC, Europe/Paris)")
    return zone


class Ticks:
    """The ticks of one cron expression in one time zone, as UTC-aware instants.

    croniter walks naive wall-clock times (no time zone, so its DST handling, which
    differs between its versions, plays no part); each wall time is placed in UTC here
    from the zone's offsets, by the DST rule of the module docstring. Raises
    :class:`SubmitOptionError` for a bad expression or zone, and from :meth:`after` and
    :meth:`at_or_before` when the expression has no tick (``0 0 31 2 *``). An
    instance is for one thread at a time.
    """

    def __init__(self, cron: str, timezone: str = "UTC") -> None:
        self.cron = validate_cron(cron)
        self.zone = validate_timezone(timezone)
        self._croniter = croniter(cron)  # parsed once; each walk resets its start
        expanded = self._croniter.expanded
        fields = cron.split()
        hour_field = fields[1] if not cron.startswith("@") and len(fields) > 1 else ""
        self._hour_wildcard = expanded[1] == ["*"] or hour_field.startswith("*")

    def after(self, instant: datetime) -> datetime:
        """The first tick strictly after ``instant`` (an aware datetime)."""
        return self._search(instant, forward=True)

    def at_or_before(self, instant: datetime) -> datetime:
        """The last tick at or before ``instant`` (an aware datetime)."""
        return self._search(instant, forward=False)

    def between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Every tick in ``(start, end]`` (documentation and tests)."""
        tick = self.after(start)
        while tick <= end:
            yield tick
            tick = self.after(tick)

    # -- the walk ---------------------------------------------------------------------------

    def _search(self, instant: datetime, forward: bool) -> datetime:
        """Walk the matching wall times from the wall time of ``instant`` (forward or
        back); the first that stands for an instant past ``instant`` is the answer, as
        UTC order follows wall-clock order except in a repeated hour, whose wall times
        are handled together (:meth:`_in_repeat`). A few croniter steps per call: one per
        gap or repeated hour crossed, plus one."""
        wall = self._wall(instant)
        step = _SECOND if forward else -_SECOND
        start = wall.replace(microsecond=0) - step  # exclusive; walls are whole seconds
        first, second = self._offsets(wall)
        if first > second:  # instant is in a repeated hour
            found, start = self._in_repeat(wall, first, second, instant, forward)
            if found is not None:
                return found
        walls = self._walk(start, forward)
        for _ in range(_MAX_STEPS):
            wall = next(walls)
            first, second = self._offsets(wall)
            if first == second:  # an ordinary wall time
                tick = (wall - first).replace(tzinfo=UTC)
                if tick > instant if forward else tick <= instant:
                    return tick
            elif first > second:  # a repeated hour
                found, start = self._in_repeat(wall, first, second, instant, forward)
                if found is not None:
                    return found
                walls = self._walk(start, forward)
            else:  # does not exist: the first instant after the gap
                end = self._transition(wall - second, wall - first)
                if not self._hour_wildcard and (end > instant if forward else end <= instant):
                    return end
                # a wildcard hour skips it (no real hour): go on from the gap's other side
                if forward:  # from its first wall time after it (inclusive)
                    walls = self._walk(self._wall(end) - _SECOND, forward)
                else:  # from its last wall time before it (inclusive)
                    walls = self._walk(self._wall(end - _SECOND) + _SECOND, forward)
        raise SubmitOptionError("cron", self.cron, f"no tick found in {_MAX_STEPS} steps")

    def _in_repeat(
        self, wall: datetime, first: timedelta, second: timedelta, instant: datetime, fwd: bool
    ) -> tuple[datetime | None, datetime]:
        """The nearest tick past ``instant`` among the wall times of the repeated hour
        holding ``wall`` (offsets ``first`` > ``second``), or None and the wall time to
        walk on from (exclusive). In UTC order the repeated wall times fire once through
        at the ``first`` offset, then (wildcard hour) once more at the ``second``."""
        change = self._transition(wall - first, wall - second)
        begin = change.replace(tzinfo=None) + second  # the repeated wall times: [begin, end)
        end = begin + (first - second)
        passes = [first, second] if self._hour_wildcard else [first]
        for offset in passes if fwd else reversed(passes):
            # a wall time w of the pass is past instant when w > (or <=) instant + offset
            edge = (instant.astimezone(UTC).replace(tzinfo=None) + offset).replace(microsecond=0)
            try:
                if fwd:
                    self._croniter.set_current(max(begin - _SECOND, edge), force=True)
                    found: datetime = self._croniter.get_next(datetime)
                else:
                    self._croniter.set_current(min(end, edge + _SECOND), force=True)
                    found = self._croniter.get_prev(datetime)
            except CroniterBadDateError as exc:
                raise SubmitOptionError("cron", self.cron, f"no tick found ({exc})") from None
            if begin <= found < end:
                return (found - offset).replace(tzinfo=UTC), found
        return None, (end - _SECOND if fwd else begin)

    def _walk(self, start: datetime, forward: bool) -> Iterator[datetime]:
        """The wall times (naive) the expression matches after (or before) ``start``,
        exclusive; croniter's "no such date" becomes :class:`SubmitOptionError`."""
        it = self._croniter
        it.set_current(start, force=True)
        try:
            while True:
                wall: datetime = it.get_next(datetime) if forward else it.get_prev(datetime)
                yield wall
        except CroniterBadDateError as exc:
            raise SubmitOptionError("cron", self.cron, f"no tick found ({exc})") from None

    def _wall(self, instant: datetime) -> datetime:
        """The naive wall-clock time of ``instant`` in the zone (fold=0)."""
        return instant.astimezone(self.zone).replace(tzinfo=None, fold=0)

    def _offsets(self, wall: datetime) -> tuple[timedelta, timedelta]:
        """The zone's UTC offsets for ``wall`` read as a first (fold=0) and a second
        (fold=1) occurrence: equal for an ordinary wall time, first > second in a
        repeated hour (fall back), first < second in a gap (spring forward)."""
        aware = wall.replace(tzinfo=self.zone, fold=0)
        first, second = aware.utcoffset(), aware.replace(fold=1).utcoffset()
        assert first is not None and second is not None
        return first, second

    def _transition(self, low: datetime, high: datetime) -> datetime:
        """The instant (UTC-aware) in ``(low, high]`` (naive UTC) at which the zone's
        offset changes from the one at ``low``: a binary search in whole seconds, as
        zones change offsets on whole seconds."""
        base = low.replace(tzinfo=UTC)
        before = base.astimezone(self.zone).utcoffset()
        lo, hi = 0, int((high - low).total_seconds())
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if (base + timedelta(seconds=mid)).astimezone(self.zone).utcoffset() == before:
                lo = mid
            else:
                hi = mid
        return base + timedelta(seconds=hi)


@dataclass(frozen=True)
class ScheduleSpec:
    """One entry of a flow file's ``schedules:`` (see ``docs/queues.md``); an entry
    without a ``name`` (``named`` False) is named by :func:`default_schedule_name`."""

    name: str
    cron: str
    timezone: str = "UTC"
    input: object = None
    named: bool = True


@dataclass(frozen=True)
class SyncResult:
    """What ``schedule sync`` did: schedule names added, updated and removed."""

    added: list[str]
    updated: list[str]
    removed: list[str]


def validate_schedule_name(name: object) -> str:
    """Return ``name`` when it is a schedule name; raise :class:`SubmitOptionError`."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise SubmitOptionError(
            "name",
            name,
            "a schedule name is 1-200 letters, digits, '_', '.', ':', '-' starting with a "
            "letter or digit",
        )
    return name


default_schedule_name = schedule_default_name  # ``<flow>-<8 hex>``; lint (E052) uses it too


def flow_schedules(flow: Flow) -> list[ScheduleSpec]:
    """The ``schedules:`` of a flow file. An entry without ``name`` is named by its cron,
    timezone and input (:func:`default_schedule_name`), never by its position."""
    out = []
    for entry in flow.document.get("schedules") or []:
        cron, timezone, input = entry["cron"], entry.get("timezone", "UTC"), entry.get("input")
        name = entry.get("name")
        out.append(
            ScheduleSpec(
                name=name or default_schedule_name(flow.name, cron, timezone, input),
                cron=cron,
                timezone=timezone,
                input=input,
                named=bool(name),
            )
        )
    return out

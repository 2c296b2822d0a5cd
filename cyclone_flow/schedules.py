"""Cron schedules: tick arithmetic (croniter + zoneinfo) and the schedule scanner of the
maintenance loop (Engine Design: Pool Budget names the schedule scanner; seeds: schedule
options).

Ticks
    A cron expression (5 fields, or 6 with seconds last, or ``@hourly``-style macros) is
    read in the wall-clock time of its IANA ``timezone`` (default ``UTC``). Across DST:
    a wall-clock time that does not exist (spring forward) fires at the first instant that
    exists after the gap, once; in the hour that repeats (fall back), an expression whose
    hour field is a wildcard (``*``, ``*/2``) fires in both occurrences (each is a real
    hour), any other fires only at the first occurrence. Ticks are stored as UTC instants.

Exactly once across clients
    The scanner of every started client looks for schedules whose ``next_run_at`` is due,
    locks each (``FOR NO KEY UPDATE SKIP LOCKED``), inserts the tick's run and moves
    ``next_run_at`` forward with a compare-and-swap, all in one transaction; a unique
    index on ``(schedule_id, scheduled_for)`` backs it. Two clients never submit a tick
    twice; a crash before the commit leaves the tick due for the next scan.

Misfires
    After downtime (no client started, or the schedule paused), the scanner submits one
    run for the most recent missed tick (``scheduled_for`` is that tick) and skips the
    older ones; resuming a paused schedule skips the ticks missed while paused.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from cyclone_flow.errors import SubmitOptionError
from cyclone_flow.options import RunOptions
from cyclone_flow.producer import Producer
from cyclone_flow.spec.compile import build_flow, document_digest
from cyclone_flow.spec.model import Flow
from cyclone_flow.store.store import Store, Wakeups
from cyclone_flow.text import zone_info

__all__ = [
    "ScheduleScanner",
    "ScheduleSpec",
    "SyncResult",
    "Ticks",
    "default_schedule_name",
    "flow_schedules",
    "validate_cron",
    "validate_schedule_name",
    "validate_timezone",
]

SCAN_BATCH = 100
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
_MAX_STEPS = 100_000  # ticks walked per search: a typo'd cron cannot loop for ever


def validate_cron(expr: object) -> str:
    """Return ``expr`` when croniter accepts it; raise :class:`SubmitOptionError`."""
    if not isinstance(expr, str) or not expr.strip() or not croniter.is_valid(expr):
        raise SubmitOptionError(
            "cron",
            expr,
            "not a cron expression: 5 fields 'minute hour day month weekday' (a 6th for "
            "seconds), e.g. '*/5 * * * *', or @hourly/@daily/@weekly/@monthly/@yearly",
        )
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
    """The ticks of one cron expression in one time zone, as UTC-aware instants."""

    def __init__(self, cron: str, timezone: str = "UTC") -> None:
        self.cron = validate_cron(cron)
        self.zone = validate_timezone(timezone)
        expanded = croniter(cron).expanded
        hour_field = cron.split()[1] if not cron.startswith("@") and len(cron.split()) > 1 else ""
        self._hour_wildcard = expanded[1] == ["*"] or hour_field.startswith("*")

    def _skip(self, local: datetime) -> bool:
        # the second occurrence of a repeated wall-clock time fires only for wildcard hours
        return local.fold == 1 and not self._hour_wildcard

    def after(self, instant: datetime) -> datetime:
        """The first tick strictly after ``instant`` (an aware datetime)."""
        it = croniter(self.cron, instant.astimezone(self.zone))
        for _ in range(_MAX_STEPS):
            local: datetime = it.get_next(datetime)
            if not self._skip(local) and local.astimezone(UTC) > instant:
                return local.astimezone(UTC)
        raise SubmitOptionError("cron", self.cron, "no tick found")  # pragma: no cover

    def at_or_before(self, instant: datetime) -> datetime:
        """The last tick at or before ``instant``."""
        it = croniter(self.cron, (instant + timedelta(microseconds=1)).astimezone(self.zone))
        for _ in range(_MAX_STEPS):
            local: datetime = it.get_prev(datetime)
            if not self._skip(local) and local.astimezone(UTC) <= instant:
                return local.astimezone(UTC)
        raise SubmitOptionError("cron", self.cron, "no tick found")  # pragma: no cover

    def between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Every tick in ``(start, end]`` (documentation and tests)."""
        tick = self.after(start)
        while tick <= end:
            yield tick
            tick = self.after(tick)


@dataclass(frozen=True)
class ScheduleSpec:
    """One entry of a flow file's ``schedules:`` (see ``docs/queues.md``): ``name`` defaults
    to ``<flow>`` for the first entry without one and ``<flow>-<index>`` for the others."""

    name: str
    cron: str
    timezone: str = "UTC"
    input: object = None


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


def default_schedule_name(flow: str, cron: str, timezone: str, input: object) -> str:
    """``<flow>-<8 hex>``: the digest of cron, timezone and input, so adding the same
    schedule twice updates one schedule."""
    digest = document_digest({"cron": cron, "timezone": timezone, "input": input})
    return f"{flow}-{digest[:8]}"


def flow_schedules(flow: Flow) -> list[ScheduleSpec]:
    """The ``schedules:`` of a flow file. An entry without ``name`` is named after the
    flow when it is the only one, else ``<flow>-<n>`` (1-based position)."""
    entries = flow.document.get("schedules") or []
    out = []
    for i, entry in enumerate(entries):
        name = entry.get("name") or (flow.name if len(entries) == 1 else f"{flow.name}-{i + 1}")
        out.append(
            ScheduleSpec(
                name=name,
                cron=entry["cron"],
                timezone=entry.get("timezone", "UTC"),
                input=entry.get("input"),
            )
        )
    return out


class ScheduleScanner:
    """The schedule scanner of the maintenance loop: ``run_once()`` submits every due tick
    once across all clients and returns how many runs it submitted.

    ``publish`` sends the wakeups of each committed tick; ``logger`` reports misfires.
    """

    def __init__(
        self,
        store: Store,
        producer: Producer,
        publish: Callable[[Wakeups], None],
        logger: logging.Logger,
        batch: int = SCAN_BATCH,
    ) -> None:
        self.store = store
        self.producer = producer
        self.publish = publish
        self.log = logger
        self.batch = batch

    def run_once(self, now: datetime | None = None) -> int:
        """Submit the due tick of every due schedule; return the number of runs submitted.

        ``now`` pins the database clock (tests, like River's ``coalesce(@now, now())``);
        by default the database's ``now()`` is used. Each tick commits in its own
        transaction with the compare-and-swap that moves ``next_run_at`` forward.
        """
        current = self.store.db_now(now)
        submitted = 0
        for schedule_id in self.store.list_due_schedules(current, self.batch):
            try:
                if self._tick(schedule_id, current):
                    submitted += 1
            except _Stale:
                continue  # another client moved the schedule on first: its tick, not ours
        return submitted

    def _tick(self, schedule_id: int, now: datetime) -> bool:
        with self.store.pool.connection() as conn, conn.transaction():
            due = self.store.lock_due_schedule(conn, schedule_id, now)
            if due is None:
                return False  # another client holds it, or it already moved on
            try:
                ticks = Ticks(due.cron, due.timezone)
            except SubmitOptionError as exc:  # edited by hand in the table
                self.log.error("schedule %s cannot tick: %s", due.name, exc)
                return False
            tick = max(ticks.at_or_before(now), due.next_run_at)
            options = RunOptions(schedule_id=due.id, scheduled_for=tick)
            if due.no_plan:  # stored before plans (so without child nodes): store its plan
                flow = build_flow(due.definition)
                run_id, wakeups = self.producer.insert(conn, flow, due.input_json, options)
            else:  # the definition as stored, with the child flows it was stored with
                run_id, wakeups = self.producer.insert_stored(
                    conn, due.workflow_id, due.input_json, options
                )
            if not self.store.advance_schedule(
                conn,
                schedule_id=due.id,
                expected=due.next_run_at,
                next_run_at=ticks.after(now),
                tick=tick,
                run_id=run_id,
            ):
                raise _Stale  # rolls the run back with the transaction
        if tick > due.next_run_at:
            missed = 0
            for _ in ticks.between(due.next_run_at, tick):
                missed += 1
                if missed >= 1000:
                    break
            self.log.warning(
                "schedule %s: %s missed tick(s) skipped after downtime; submitted the most "
                "recent one, %s",
                due.name,
                f"{missed}+" if missed >= 1000 else missed,
                tick.isoformat(),
            )
        self.publish(wakeups)
        return True


class _Stale(Exception):
    """Internal: the compare-and-swap of a tick changed no row."""

"""The schedule scanner (Engine Design: Pool Budget names it; seeds: schedule options):
every started client submits each due tick of the cron schedules, once across all clients.

Exactly once across clients
    One pass looks for schedules whose ``next_run_at`` is due at ``now``, locks each
    (``FOR NO KEY UPDATE SKIP LOCKED``), inserts the tick's run and moves ``next_run_at``
    forward with a compare-and-swap, all in one transaction; a unique index on
    ``(schedule_id, scheduled_for)`` backs it. Two clients never submit a tick twice; a
    crash before the commit leaves the tick due for the next pass.

Misfires
    After downtime (no client started, or the schedule paused), the scanner submits one
    run for the most recent missed tick (``scheduled_for`` is that tick) and skips the
    older ones; resuming a paused schedule skips the ticks missed while paused.

The tick arithmetic is :class:`cyclone_flow.schedules.Ticks`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from cyclone_flow.db import schedules as stored
from cyclone_flow.db import session
from cyclone_flow.db.conn import Conn, Database, Session
from cyclone_flow.db.errors import database_lost
from cyclone_flow.db.rows import DueRef, DueSchedule
from cyclone_flow.errors import FlowRetiredError, ScheduleNotFoundError, SubmitOptionError
from cyclone_flow.flowfile.build import build_flow
from cyclone_flow.inserter import Inserter, RunId
from cyclone_flow.maintenance.base import MaintenanceService
from cyclone_flow.notify import Publish, Wakeups
from cyclone_flow.options import RunOptions
from cyclone_flow.schedules import Ticks
from cyclone_flow.text import storable

__all__ = [
    "SCHEDULE_BATCH",
    "SCHEDULE_INTERVAL_S",
    "ScheduleScanner",
    "ScheduleScannerConfig",
    "ScheduleScannerResult",
]

SCHEDULE_INTERVAL_S = 10.0
"""Default seconds between two passes (a client uses ``ClientConfig.sweep_interval``)."""

SCHEDULE_BATCH = 100
"""Default due schedules looked at per pass."""

RETRY_FIRST_S = 10.0
"""Default seconds a failing schedule is left alone after its first failure."""

RETRY_MAX_S = 600.0
"""Default most seconds a failing schedule is left alone (the wait doubles up to it)."""

MISFIRE_WARNING_AFTER_S = 30.0
"""Default span of skipped ticks above which they are a warning (a client passes three
sweep intervals); closer ticks are the sweep's grain and logged at debug level."""


@dataclass(frozen=True)
class ScheduleScannerConfig:
    """``interval_s`` between passes; ``batch_size`` due schedules per pass; a failing
    schedule waits ``retry_first_s`` after its first failure, doubling at each further one
    up to ``retry_max_s``. Ticks skipped over more than ``misfire_warning_after_s`` are a
    warning (a downtime); closer ones (``* * * * * *``: one run per pass) are debug."""

    interval_s: float = SCHEDULE_INTERVAL_S
    batch_size: int = SCHEDULE_BATCH
    retry_first_s: float = RETRY_FIRST_S
    retry_max_s: float = RETRY_MAX_S
    misfire_warning_after_s: float = MISFIRE_WARNING_AFTER_S


@dataclass(frozen=True)
class ScheduleScannerResult:
    """What one pass did: runs ``submitted`` (one per due tick this client won) and
    schedules whose tick ``failed`` (each logged with its name)."""

    submitted: int = 0
    failed: int = 0

    def summary(self) -> str | None:
        """One log line when the pass did something, else None."""
        if not (self.submitted or self.failed):
            return None
        return (
            f"schedule scanner: submitted {self.submitted} run(s), {self.failed} schedule(s) failed"
        )


class ScheduleScanner(MaintenanceService[ScheduleScannerConfig]):
    """The schedule scanner; ``run_once(now=None)`` is one pass (see the module docstring).

    Takes the arguments of :class:`~cyclone_flow.maintenance.base.MaintenanceService`
    plus ``inserter`` (second), which inserts each tick's run; ``publish`` sends the
    wakeups of each committed tick; ``logger`` reports misfires and failing schedules.

    A schedule whose tick fails (its cron edited by hand into one that never fires, a
    stored definition that no longer inserts, a statement error) is logged with its name
    and skipped; the others of the pass go on. This scanner then leaves it alone for
    ``retry_first_s`` (10 s), doubling at each further failure up to ``retry_max_s``
    (10 min), and tries it at once when its row changes (``schedule sync``, ``add``,
    ``resume``). Its tick stays due meanwhile, so it is submitted (misfire policy) once
    the schedule works again. Losing the database itself (connection trouble) is no
    schedule's fault: it ends the pass, for the maintenance loop to log and retry.
    """

    name = "schedule scanner"
    config_class = ScheduleScannerConfig

    def __init__(
        self,
        db: Database,
        inserter: Inserter,
        config: ScheduleScannerConfig | None = None,
        publish: Publish | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        super().__init__(db, config, publish, logger)
        self.inserter = inserter
        self._failing: dict[int, _Failure] = {}  # schedule id -> its last failure

    def run_once(self, now: datetime | None = None) -> ScheduleScannerResult:
        """Submit the due tick of every due schedule; returns the runs submitted and the
        schedules that failed.

        ``now`` pins the database clock (tests, like River's ``coalesce(@now, now())``);
        by default the database's ``now()`` is used. Each tick commits in its own
        transaction with the compare-and-swap that moves ``next_run_at`` forward.
        """
        with self.db.session() as s:
            current = session.pg_now(s, now=now)
            waiting = sum(1 for f in self._failing.values() if f.retry_at > current)
            due = stored.schedule_list_due(s, now=current, batch=self.config.batch_size + waiting)
        submitted = failed = 0
        for ref in due:
            failure = self._failing.get(ref.id)
            if failure is not None and failure.version == ref.version:
                if failure.retry_at > current:
                    continue  # backing off: the other schedules first
            else:
                failure = None  # a changed schedule gets a fresh start
            try:
                if self._tick(ref.id, current):
                    submitted += 1
            except _Stale:
                pass  # another client moved the schedule on first: its tick, not ours
            except Exception as exc:
                if database_lost(exc):
                    raise
                self._failed(ref, failure, current, exc)
                failed += 1
                continue
            self._failing.pop(ref.id, None)
        listed = {ref.id for ref in due}
        for schedule_id in [i for i in self._failing if i not in listed]:
            del self._failing[schedule_id]  # no longer due: removed, paused or fixed
        return ScheduleScannerResult(submitted, failed)

    def _failed(
        self, ref: DueRef, previous: _Failure | None, now: datetime, exc: Exception
    ) -> None:
        count = 1 if previous is None else previous.count + 1
        # the exponent is capped: a schedule failing for days must not overflow the delay
        doubled = self.config.retry_first_s * 2 ** min(count - 1, 40)
        delay = timedelta(seconds=min(doubled, self.config.retry_max_s))
        self._failing[ref.id] = _Failure(ref.version, count, now + delay)
        self.log.error(
            "schedule %s cannot tick (failure %d): %s: %s; skipped, next attempt in %ds",
            ref.name,
            count,
            type(exc).__name__,
            exc,
            delay.total_seconds(),
            exc_info=not isinstance(exc, (SubmitOptionError, FlowRetiredError)),
        )

    def _tick(self, schedule_id: int, now: datetime) -> bool:
        with self.db.transaction() as conn:
            s = Session(conn, self.db.q)
            due = stored.schedule_lock_due(s, id=schedule_id, now=now)
            if due is None:
                return False  # another client holds it, or it already moved on
            if due.retired:  # resumed by hand after its flow was retired
                raise FlowRetiredError(due.flow_name)
            ticks = Ticks(due.cron, due.timezone)  # SubmitOptionError: edited by hand
            tick = max(ticks.at_or_before(now), due.next_run_at)
            options = RunOptions(schedule_id=due.id, scheduled_for=tick, revision=due.revision)
            run_id, wakeups = self._insert(conn, due, options)
            if not stored.schedule_advance_if_unchanged(
                s,
                id=due.id,
                expected=due.next_run_at,
                next_run_at=ticks.after(now),
                tick=tick,
                run_id=run_id,
            ):
                raise _Stale  # rolls the run back with the transaction
        if tick > due.next_run_at:
            self._skipped(due.name, ticks, due.next_run_at, tick)
        if self.publish is not None:
            self.publish(wakeups)
        return True

    def trigger(self, name: str, now: datetime | None = None) -> RunId:
        """Submit one run of the schedule ``name`` now, outside its cadence (paused or
        not): the run is inserted as a tick's is (the stored definition, the schedule's
        input, this client's limits) with ``schedule_id`` set and no ``scheduled_for``
        (it is no tick), and it becomes the schedule's last run; ``next_run_at`` is left
        alone. ``now`` pins the clock (the last run's time). Raises
        ScheduleNotFoundError."""
        if not storable(name):
            raise ScheduleNotFoundError(name)
        with self.db.transaction() as conn:
            s = Session(conn, self.db.q)
            current = session.pg_now(s, now=now)
            due = stored.schedule_lock_named(s, name=name)
            if due is None:
                raise ScheduleNotFoundError(name)
            if due.retired:
                raise FlowRetiredError(due.flow_name)
            run_id, wakeups = self._insert(
                conn, due, RunOptions(schedule_id=due.id, revision=due.revision)
            )
            stored.schedule_set_last_run(s, id=due.id, at=current, run_id=run_id)
        if self.publish is not None:
            self.publish(wakeups)
        return run_id

    def _insert(self, conn: Conn, due: DueSchedule, options: RunOptions) -> tuple[RunId, Wakeups]:
        """Insert a run of the locked schedule ``due`` in the caller's transaction."""
        if due.no_plan:  # stored before plans (so without child nodes): store its plan
            flow = build_flow(due.definition)
            return self.inserter.insert(conn, flow, due.input_json, options)
        # the definition as stored, with the child flows it was stored with
        return self.inserter.insert_stored(conn, due.workflow_id, due.input_json, options)

    def _skipped(self, name: str, ticks: Ticks, first: datetime, tick: datetime) -> None:
        """Log the ticks skipped from ``first`` (the due one) to ``tick`` (the one
        submitted): a warning after a downtime, debug when they are the sweep's grain."""
        after = timedelta(seconds=self.config.misfire_warning_after_s)
        level = logging.WARNING if tick - first > after else logging.DEBUG
        if not self.log.isEnabledFor(level):
            return
        missed = 0  # as many as in (first, tick]
        for _ in ticks.between(first, tick):
            missed += 1
            if missed >= 1000:
                break
        if level == logging.WARNING:
            message = "schedule %s: %s missed tick(s) skipped after downtime; submitted the most "
            message += "recent one, %s"
        else:
            message = "schedule %s: %s tick(s) closer than the sweep skipped; submitted %s"
        self.log.log(
            level, message, name, f"{missed}+" if missed >= 1000 else missed, tick.isoformat()
        )


class _Stale(Exception):
    """Internal: the compare-and-swap of a tick changed no row."""


@dataclass(frozen=True)
class _Failure:
    """Internal: a schedule's last failed tick: the row ``version`` it failed on, the
    consecutive ``count`` and when this scanner tries it again."""

    version: str
    count: int
    retry_at: datetime

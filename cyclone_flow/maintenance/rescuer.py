"""The recovery sweep (Engine Design: Leases and Heartbeats; Client Options:
WithMaxReclaims), River's ``JobRescuer``: every started client runs it, so a crashed
worker's steps go back to work within one lease TTL plus one sweep interval (plus the
time of the pass itself: see below).

One pass runs batches, each part over a batch found without locks and changed only
through a compare-and-swap (any number of clients sweep at once; a step decided meanwhile
is a stale no-op):

1. running steps past ``started_at + timeout`` (even with a fresh lease) fail the attempt
   with kind ``timeout`` (retried while attempts remain);
2. with ``max_reclaims`` > 0, expired leases of steps already reclaimed that often are
   discarded with kind ``reclaim_limit`` (no attempt charged);
3. every other expired lease goes back to ``available`` with ``reclaims + 1``, no attempt
   charged, and a wakeup for its queue.

The lists and the rescue compare with ``now`` (the database's clock unless a test pins
it); each failure is guarded by the step's state and its claim's lease generation. Each
batch is at most ``batch_size`` steps per part (the rescue's ``LIMIT`` holds whatever
the plan: ``step_rescue_if_lease_expired``); while a part came back full, the pass runs another
batch, for at most ``pass_budget_s`` seconds (default half the sweep interval; the batch
that is running when the budget runs out finishes), so a crash of many leases comes back
in one pass and a pass never runs into the next one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from cyclone_flow.db import steps
from cyclone_flow.db.conn import retry_conflicts
from cyclone_flow.db.rows import LeasedStep, RescuedStep
from cyclone_flow.db.steps import FailParams
from cyclone_flow.engine import fail
from cyclone_flow.errors import ReclaimLimitExceeded, StepTimeoutError
from cyclone_flow.events import StepEvent
from cyclone_flow.logs import step_extra
from cyclone_flow.maintenance.base import MaintenanceService
from cyclone_flow.notify import Wakeups
from cyclone_flow.states import ErrorKind, EventKind, StepState

__all__ = ["SWEEP_BATCH", "SWEEP_INTERVAL_S", "Rescuer", "RescuerConfig", "RescuerResult"]

SWEEP_INTERVAL_S = 10.0
"""Default seconds between two sweeps (a client uses ``ClientConfig.sweep_interval``)."""

SWEEP_BATCH = 500
"""Default steps looked at per part of one batch of a pass."""


@dataclass(frozen=True)
class RescuerConfig:
    """``interval_s`` between passes; ``batch_size`` steps per part of a batch;
    ``max_reclaims``: reclaims of an expired lease before the step is discarded with
    kind ``reclaim_limit`` (0: unbounded); ``pass_budget_s``: seconds one pass may spend
    on further batches while they come back full (None: ``interval_s / 2``)."""

    interval_s: float = SWEEP_INTERVAL_S
    batch_size: int = SWEEP_BATCH
    max_reclaims: int = 0
    pass_budget_s: float | None = None

    @property
    def budget_s(self) -> float:
        """The pass budget in seconds (``pass_budget_s``, or half the interval)."""
        return self.interval_s / 2 if self.pass_budget_s is None else self.pass_budget_s


@dataclass(frozen=True)
class RescuerResult:
    """What one pass did: attempts failed ``timed_out``, steps discarded at the
    ``reclaim_limit``, expired leases ``rescued`` (back to available)."""

    timed_out: int = 0
    reclaim_limit: int = 0
    rescued: int = 0

    def summary(self) -> str | None:
        """One log line when the pass did something, else None."""
        if not (self.timed_out or self.reclaim_limit or self.rescued):
            return None
        return (
            f"recovery sweep: reclaimed {self.rescued} step(s) with expired leases, failed "
            f"{self.timed_out} timed-out attempt(s), discarded {self.reclaim_limit} at the "
            "reclaim limit"
        )


class Rescuer(MaintenanceService[RescuerConfig]):
    """The recovery sweep; ``run_once(now=None)`` is one pass (see the module docstring).

    ``publish`` sends the wakeups of each committed change; ``reporter`` reports the
    step events (``retry_scheduled`` / ``discarded`` with the error handler's call,
    ``reclaimed``)."""

    name = "recovery sweep"
    config_class = RescuerConfig

    def run_once(self, now: datetime | None = None) -> RescuerResult:
        """One pass at ``now`` (None: the database's clock): batches while one comes back
        full, within the pass budget (see the module docstring); returns its counts."""
        deadline = time.monotonic() + self.config.budget_s
        timed_out = reclaim_limit = rescued = 0
        while True:
            t, r, b, full = self._batch(now)
            timed_out, reclaim_limit, rescued = timed_out + t, reclaim_limit + r, rescued + b
            if not full or time.monotonic() >= deadline:
                return RescuerResult(timed_out, reclaim_limit, rescued)

    def _batch(self, now: datetime | None) -> tuple[int, int, int, bool]:
        """One batch of each part: the timed-out attempts failed, the steps discarded at
        the reclaim limit, the leases rescued, and whether a part came back full."""
        cfg = self.config
        with self.db.session() as s:
            timed_out = steps.step_list_timed_out(s, batch=cfg.batch_size, now=now)
        failed_timeout = sum(self._fail(step, ErrorKind.TIMEOUT) for step in timed_out)
        failed_limit = 0
        exhausted = []
        if cfg.max_reclaims > 0:
            with self.db.session() as s:
                exhausted = steps.step_list_reclaim_exhausted(
                    s, max_reclaims=cfg.max_reclaims, batch=cfg.batch_size, now=now
                )
            failed_limit = sum(self._fail(step, ErrorKind.RECLAIM_LIMIT) for step in exhausted)

        def rescue() -> list[RescuedStep]:
            with self.db.session() as s:
                return steps.step_rescue_if_lease_expired(
                    s, max_reclaims=cfg.max_reclaims, batch=cfg.batch_size, now=now
                )

        rescued = retry_conflicts(rescue)
        if rescued:
            if self.publish is not None:
                self.publish(Wakeups(queues={back.queue for back in rescued}))
            for back in rescued:
                self.reporter.report(
                    StepEvent(EventKind.RECLAIMED, back.run_id, back.node, queue=back.queue)
                )
        full = cfg.batch_size in (len(timed_out), len(exhausted), len(rescued))
        return failed_timeout, failed_limit, len(rescued), full

    def _fail(self, step: LeasedStep, kind: ErrorKind) -> bool:
        """Fail the attempt of ``step`` (its claim's generation guards it): kind
        ``timeout`` retries while attempts remain, ``reclaim_limit`` discards. The list
        that found it decided the time (``now``); the compare-and-swap checks the state
        and the generation only. False when stale."""
        run_id, node = step.run_id, step.node
        timeout = kind is ErrorKind.TIMEOUT
        if timeout:
            message = "step timed out (started_at + timeout passed)"
        else:
            message = f"lease expired after {self.config.max_reclaims} reclaims"
        attempt = FailParams(
            step_id=step.id,
            run_id=run_id,
            generation=step.lease_generation,
            owner=None,
            error=message,
            error_kind=kind,
            permanent=not timeout,
        )
        outcome, backoff_error = retry_conflicts(
            lambda: fail.fail_step_alone(self.db, self.publish, attempt)
        )
        if backoff_error is not None:
            self.log.error(
                "step %s of run %s: its retry backoff could not be computed (%s); the "
                "attempt is recorded without backoff",
                node,
                run_id,
                backoff_error,
                extra=step_extra(run_id, node),
            )
        if outcome is None:
            return False
        # a failed attempt: a run's progress display tells it itself (EVENT_FIELD)
        self.log.warning(
            "step %s of run %s: %s",
            node,
            run_id,
            message,
            extra=step_extra(run_id, node, event="attempt_failed"),
        )
        event = StepEvent(
            (
                EventKind.RETRY_SCHEDULED
                if outcome.step_state is StepState.AVAILABLE
                else EventKind.DISCARDED
            ),
            run_id,
            node,
            step.id,
            error=message,
            error_kind=str(kind),
            queue=outcome.queue,
        )
        error: Exception = (
            StepTimeoutError(run_id, node)
            if timeout
            else ReclaimLimitExceeded(run_id, node, self.config.max_reclaims)
        )
        self.reporter.report(
            event,
            cancelled=[(run_id, n) for n in outcome.cancelled],
            engine=outcome.engine_events,
            error=error,
        )
        return True

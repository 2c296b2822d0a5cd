"""The background services every started client runs, in one shape (River's
``internal/maintenance``): a frozen ``XConfig`` with named defaults (units in the names:
``interval_s``, ``batch_size``), a constructor taking the database, the config, a publish
callable, a logger and an event reporter (never a Client), and ``run_once(now=None) ->
XResult``, a small frozen dataclass of counts. ``now`` pins the clock of the service's
time-dependent statements (``coalesce(%(now)s::timestamptz, now())``), so each service is
tested by calling ``run_once`` without starting a client.

- :mod:`~cyclone_flow.maintenance.rescuer`: the recovery sweep (timed-out steps, the
  reclaim limit, expired leases back to available);
- :mod:`~cyclone_flow.maintenance.scheduler`: the schedule scanner (cron ticks);
- :mod:`~cyclone_flow.maintenance.sequences`: the safety net of stalled sequences;
- :mod:`~cyclone_flow.maintenance.retention`: the retention sweep (purge old runs);
- :mod:`~cyclone_flow.maintenance.wait_scanner` and
  :mod:`~cyclone_flow.maintenance.deadline_scanner`: expired waits, runs past deadline;
- :mod:`~cyclone_flow.maintenance.worker_reaper`: deletes the heartbeat rows of dead
  workers;
- :mod:`~cyclone_flow.maintenance.rate_window_pruner`: deletes the rate-limit rows of
  idle rate keys;
- :mod:`~cyclone_flow.maintenance.base`: the constructor and ``interval_s`` they share;
  :func:`services` builds the set a worker runs;
- :mod:`~cyclone_flow.maintenance.loop`: the thin loop of the worker's maintenance
  thread, which runs each service's ``run_once`` in turn.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cyclone_flow.config import ClientConfig
from cyclone_flow.db.conn import Database
from cyclone_flow.events import Reporter
from cyclone_flow.maintenance.deadline_scanner import DeadlineScanner, DeadlineScannerConfig
from cyclone_flow.maintenance.loop import Service
from cyclone_flow.maintenance.owner_release import OwnerRelease, OwnerReleaseConfig
from cyclone_flow.maintenance.rate_window_pruner import RateWindowPruner, RateWindowPrunerConfig
from cyclone_flow.maintenance.rescuer import Rescuer, RescuerConfig
from cyclone_flow.maintenance.retention import RetentionSweeper, RetentionSweeperConfig
from cyclone_flow.maintenance.scheduler import ScheduleScanner
from cyclone_flow.maintenance.sequences import SequenceScanner, SequenceScannerConfig
from cyclone_flow.maintenance.wait_scanner import WaitScanner, WaitScannerConfig
from cyclone_flow.maintenance.worker_reaper import WorkerReaper, WorkerReaperConfig
from cyclone_flow.notify import Publish

__all__ = ["Services", "services"]

SLOW_INTERVAL_S = 60.0
"""The least interval of the services whose pass is one small DELETE (worker reaper, rate
window pruner): every sweep_interval, at most once a minute."""


@dataclass(frozen=True)
class Services:
    """The maintenance services of a started client, one field each, in the order the
    maintenance loop runs them (Engine Design: Pool Budget lists them); ``scheduler`` None:
    the client has none, ``retention`` None: the sweep is off."""

    rescuer: Rescuer
    scheduler: ScheduleScanner | None
    sequences: SequenceScanner
    retention: RetentionSweeper | None
    wait_scanner: WaitScanner
    deadline_scanner: DeadlineScanner
    worker_reaper: WorkerReaper
    owner_release: OwnerRelease
    rate_window_pruner: RateWindowPruner

    def in_order(self) -> list[Service]:
        """The services there are, in the order the maintenance loop runs them."""
        every: tuple[Service | None, ...] = (
            self.rescuer,
            self.scheduler,
            self.sequences,
            self.retention,
            self.wait_scanner,
            self.deadline_scanner,
            self.worker_reaper,
            self.owner_release,
            self.rate_window_pruner,
        )
        return [s for s in every if s is not None]


def services(
    db: Database,
    config: ClientConfig,
    publish: Publish,
    logger: logging.Logger,
    reporter: Reporter,
    scheduler: ScheduleScanner | None = None,
) -> Services:
    """The services a worker of ``config`` runs: each every ``config.sweep_interval``
    seconds (the worker reaper and rate window pruner at most once a minute, retention at
    its own ``RetentionConfig.interval``, and only when on); ``scheduler``: the client's
    schedule scanner (None: none)."""
    tick = config.sweep_interval
    slow = max(tick, SLOW_INTERVAL_S)
    retention = config.retention
    return Services(
        rescuer=Rescuer(
            db,
            RescuerConfig(interval_s=tick, max_reclaims=config.max_reclaims),
            publish,
            logger,
            reporter,
        ),
        scheduler=scheduler,
        sequences=SequenceScanner(db, SequenceScannerConfig(interval_s=tick), publish, logger),
        retention=(
            RetentionSweeper(db, RetentionSweeperConfig.of(retention), logger=logger)
            if retention is not None and retention.enabled
            else None
        ),
        wait_scanner=WaitScanner(db, WaitScannerConfig(interval_s=tick), publish, logger, reporter),
        deadline_scanner=DeadlineScanner(
            db, DeadlineScannerConfig(interval_s=tick), publish, logger, reporter
        ),
        worker_reaper=WorkerReaper(db, WorkerReaperConfig(interval_s=slow), logger=logger),
        owner_release=OwnerRelease(db, OwnerReleaseConfig(interval_s=tick), publish, logger),
        rate_window_pruner=RateWindowPruner(
            db, RateWindowPrunerConfig(interval_s=slow), logger=logger
        ),
    )

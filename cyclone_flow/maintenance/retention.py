"""The retention sweep: purge terminal runs older than an age, with their steps and deps,
in batches (Client Options: WithRetentionSweep; Retention).

A started client with ``retention`` on runs it in its maintenance loop every
``RetentionConfig.interval`` seconds; ``Client.purge`` and ``cyclone-flow purge`` run one
pass (:func:`purge`). Any number of clients may sweep at once: each batch deletes rows it
locked with ``FOR UPDATE SKIP LOCKED``, so two sweeps never wait on or double-count the
same run. The age is measured back from ``now``: the database's clock unless a test pins
it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from cyclone_flow.config import RETENTION_BATCH_SIZE, RETENTION_INTERVAL_S, RetentionConfig
from cyclone_flow.db import runs
from cyclone_flow.db.conn import Database
from cyclone_flow.maintenance.base import MaintenanceService

__all__ = [
    "MAX_BATCHES_PER_PASS",
    "RetentionSweeper",
    "RetentionSweeperConfig",
    "RetentionSweeperResult",
    "purge",
]

MAX_BATCHES_PER_PASS = 1_000
"""Default bound of one pass; the next pass goes on where it stopped."""


@dataclass(frozen=True)
class RetentionSweeperConfig:
    """``age_s``: purge terminal runs whose ``finished_at`` is more than that many seconds
    old (0 or less: the sweep is off); ``interval_s`` between passes; ``batch_size`` runs
    deleted per statement; ``max_batches`` per pass."""

    age_s: float
    interval_s: float = RETENTION_INTERVAL_S
    batch_size: int = RETENTION_BATCH_SIZE
    max_batches: int = MAX_BATCHES_PER_PASS

    @classmethod
    def of(cls, option: RetentionConfig) -> RetentionSweeperConfig:
        """The service's config from the client option ``retention``."""
        return cls(
            age_s=option.default_age, interval_s=option.interval, batch_size=option.batch_size
        )

    @property
    def enabled(self) -> bool:
        """False when ``age_s <= 0`` (nothing is ever purged)."""
        return self.age_s > 0


@dataclass(frozen=True)
class RetentionSweeperResult:
    """What one pass did: runs ``deleted`` (with their steps, deps, signals and child
    runs), finished more than ``age_s`` seconds before the pass."""

    deleted: int = 0
    age_s: float = 0.0

    def summary(self) -> str | None:
        """One log line when the pass did something, else None."""
        if not self.deleted:
            return None
        return f"retention: purged {self.deleted} run(s) finished more than {self.age_s:g}s ago"


class RetentionSweeper(MaintenanceService[RetentionSweeperConfig]):
    """The retention sweep; ``run_once(now=None)`` is one pass (see the module
    docstring)."""

    name = "retention sweep"
    config_class = RetentionSweeperConfig

    def run_once(self, now: datetime | None = None) -> RetentionSweeperResult:
        """Delete terminal runs whose ``finished_at`` is more than ``age_s`` seconds before
        ``now`` (None: the database's clock), batch after batch (each committed) until a
        batch comes back short; nothing when the sweep is off (``age_s <= 0``)."""
        cfg = self.config
        if not cfg.enabled:
            return RetentionSweeperResult(0, cfg.age_s)
        age_us = int(cfg.age_s * 1_000_000)
        total = 0
        for _ in range(cfg.max_batches):
            with self.db.session() as s:
                deleted = runs.run_purge_if_terminal(
                    s, age_us=age_us, batch=cfg.batch_size, now=now
                )
            total += deleted
            if deleted < cfg.batch_size:
                break
        return RetentionSweeperResult(total, cfg.age_s)


def purge(db: Database, option: RetentionConfig, logger: logging.Logger) -> int:
    """One pass of the retention sweep now, as ``Client.purge`` and ``cyclone-flow purge``
    run it (logged as the maintenance loop logs a pass); returns the runs deleted."""
    result = RetentionSweeper(db, RetentionSweeperConfig.of(option), logger=logger).run_once()
    summary = result.summary()
    if summary is not None:
        logger.info("%s", summary)
    return result.deleted

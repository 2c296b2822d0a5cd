"""The retention sweep: purge terminal runs older than an age, with their steps and deps,
in batches (Client Options: WithRetentionSweep; Retention).

It runs inside the maintenance loop of a started client every
``RetentionConfig.interval`` seconds; ``cyclone-flow purge`` runs the same pass once. Any
number of clients may sweep at once: each batch deletes rows it locked with
``FOR UPDATE SKIP LOCKED``, so two sweeps never wait on or double-count the same run.
"""

from __future__ import annotations

import logging
import time

from cyclone_flow.config import RetentionConfig
from cyclone_flow.db import runs
from cyclone_flow.db.conn import Database

MAX_BATCHES_PER_PASS = 1_000  # bounds one pass; the next pass goes on where it stopped


class RetentionSweeper:
    """``run_once()`` purges; ``tick()`` runs it when ``config.interval`` has passed."""

    def __init__(self, db: Database, config: RetentionConfig, logger: logging.Logger) -> None:
        self.db = db
        self.config = config
        self.log = logger
        self._next_at = 0.0  # monotonic; 0 runs the first pass at the first tick

    def run_once(self) -> int:
        """Delete terminal runs whose ``finished_at`` is older than ``default_age``
        seconds, batch after batch until a batch comes back short; return the number of
        runs deleted (0 when the sweep is disabled: ``default_age <= 0``)."""
        if not self.config.enabled:
            return 0
        total = 0
        for _ in range(MAX_BATCHES_PER_PASS):
            deleted = self._purge_batch()
            total += deleted
            if deleted < self.config.batch_size:
                break
        if total:
            self.log.info(
                "retention: purged %d run(s) finished more than %gs ago",
                total,
                self.config.default_age,
            )
        return total

    def _purge_batch(self) -> int:
        """One batch: at most ``batch_size`` runs deleted (SKIP LOCKED), committed."""
        with self.db.session() as s:
            return runs.run_purge_terminal(
                s, age_us=int(self.config.default_age * 1_000_000), batch=self.config.batch_size
            )

    def tick(self) -> int:
        """Run :meth:`run_once` if ``interval`` seconds passed since the last pass (the
        first tick always runs); return what it purged, else 0."""
        now = time.monotonic()
        if not self.config.enabled or now < self._next_at:
            return 0
        self._next_at = now + self.config.interval
        return self.run_once()

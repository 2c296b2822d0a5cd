"""The worker reaper: deletes the ``cyclone_workers`` rows of clients that stopped
heartbeating without a clean shutdown (a crash, ``kill -9``, a lost host).

A row not heartbeated for one ``lease_ttl`` is already shown as dead (``Client.workers()``,
``cyclone-flow workers``) and no longer counts as serving its queues; the reaper deletes
it once it has not been heartbeated for ``STALE_FACTOR`` (10) times its own ``lease_ttl``,
so a dead worker stays visible for a while (5 minutes at the default 30 s TTL). Any number
of clients may reap at once (a row is deleted once; the others delete nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cyclone_flow.db import workers
from cyclone_flow.maintenance.base import MaintenanceService

__all__ = ["STALE_FACTOR", "WorkerReaper", "WorkerReaperConfig", "WorkerReaperResult"]

STALE_FACTOR = 10.0
"""A worker row is deleted when not heartbeated for this many times its ``lease_ttl``."""

REAP_INTERVAL_S = 60.0
"""Default seconds between two passes (a pass is one small DELETE)."""


@dataclass(frozen=True)
class WorkerReaperConfig:
    """``interval_s`` between passes; ``factor``: delete rows not heartbeated for that
    many times their ``lease_ttl``."""

    interval_s: float = REAP_INTERVAL_S
    factor: float = STALE_FACTOR


@dataclass(frozen=True)
class WorkerReaperResult:
    """What one pass did: the client ids of the dead workers' rows ``deleted``."""

    deleted: tuple[str, ...] = ()

    def summary(self) -> str | None:
        """One log line when the pass did something, else None."""
        if not self.deleted:
            return None
        return f"worker reaper: deleted the rows of {len(self.deleted)} dead worker(s)"


class WorkerReaper(MaintenanceService[WorkerReaperConfig]):
    """The worker reaper; ``run_once(now=None)`` is one pass (see the module docstring)."""

    name = "worker reaper"
    config_class = WorkerReaperConfig

    def run_once(self, now: datetime | None = None) -> WorkerReaperResult:
        """Delete the rows not heartbeated for ``factor`` x their ``lease_ttl`` before
        ``now`` (None: the database's clock)."""
        with self.db.session() as s:
            deleted = workers.worker_delete_if_stale(s, factor=self.config.factor, now=now)
        return WorkerReaperResult(tuple(deleted))

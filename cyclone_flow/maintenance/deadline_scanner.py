"""The deadline scanner (Engine Design: Pool Budget names it among the tasks of every
started client): running runs past their flow's ``deadline`` fail with error_kind
``deadline``, their unfinished steps and child runs cancelled; a child run's parent node is
discarded (kind ``child_failed``).

One pass finds a batch without locks, then fails each run in its own transaction
(:func:`cyclone_flow.engine.tx.transaction`, which publishes its wakeups after the commit)
under the run lock, through a compare-and-swap guarded by the state and
``deadline_at <= now``: many clients can scan at once, and a run that finished meanwhile
is a stale no-op. ``now`` is the database's clock unless a test pins it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cyclone_flow.db import runs
from cyclone_flow.engine import fail
from cyclone_flow.engine.tx import transaction
from cyclone_flow.events import cancelled_in
from cyclone_flow.maintenance.base import MaintenanceService

__all__ = [
    "SCAN_BATCH",
    "SCAN_INTERVAL_S",
    "DeadlineScanner",
    "DeadlineScannerConfig",
    "DeadlineScannerResult",
]

SCAN_INTERVAL_S = 10.0
"""Default seconds between two passes (a client uses ``ClientConfig.sweep_interval``)."""

SCAN_BATCH = 500
"""Default runs looked at per pass."""


@dataclass(frozen=True)
class DeadlineScannerConfig:
    """``interval_s`` between passes; ``batch_size`` runs looked at per pass."""

    interval_s: float = SCAN_INTERVAL_S
    batch_size: int = SCAN_BATCH


@dataclass(frozen=True)
class DeadlineScannerResult:
    """What one pass did: runs ``failed`` by this client."""

    failed: int = 0

    def summary(self) -> str | None:
        """One log line when the pass did something, else None."""
        return f"deadline scanner: {self.failed} run(s) failed" if self.failed else None


class DeadlineScanner(MaintenanceService[DeadlineScannerConfig]):
    """The deadline scanner; ``run_once(now=None)`` is one pass (see the module
    docstring)."""

    name = "deadline scanner"
    config_class = DeadlineScannerConfig

    def run_once(self, now: datetime | None = None) -> DeadlineScannerResult:
        """One pass at ``now`` (None: the database's clock); returns its counts."""
        failed = 0
        with self.db.session() as s:
            past = runs.run_list_past_deadline(s, batch=self.config.batch_size, now=now)
        for run_id in past:
            with transaction(self.db, self.publish) as tx:
                result = fail.fail_past_deadline(tx, run_id, now)
            if result is None:
                continue  # finished meanwhile, or failed by another client
            cancelled, error = result
            failed += 1
            self.log.warning("run %s failed: %s", run_id, error)
            self.reporter.report(
                cancelled=[(run_id, node) for node in cancelled] + cancelled_in(tx.effects),
                engine=tx.effects.events,
            )
        return DeadlineScannerResult(failed)

"""The safety net of sequences (see ``docs/queues.md``): every pass releases the first open
run of each sequence whose predecessors all finished but which is still held (e.g. the
releasing transaction skipped it because the run was locked), one transaction per
sequence (:func:`cyclone_flow.engine.advance.release_sequence`, which takes the sequence's
row lock and releases only a run that is still held).

Nothing here depends on the clock: ``run_once(now)`` accepts ``now`` for the shape of
every service and does not use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cyclone_flow.db import runs
from cyclone_flow.engine import advance
from cyclone_flow.engine.tx import transaction
from cyclone_flow.maintenance.base import MaintenanceService

__all__ = [
    "SEQUENCE_BATCH",
    "SEQUENCE_INTERVAL_S",
    "SequenceScanner",
    "SequenceScannerConfig",
    "SequenceScannerResult",
]

SEQUENCE_INTERVAL_S = 10.0
"""Default seconds between two passes (a client uses ``ClientConfig.sweep_interval``)."""

SEQUENCE_BATCH = 100
"""Default stalled sequences looked at per pass."""


@dataclass(frozen=True)
class SequenceScannerConfig:
    """``interval_s`` between passes; ``batch_size`` sequences looked at per pass."""

    interval_s: float = SEQUENCE_INTERVAL_S
    batch_size: int = SEQUENCE_BATCH


@dataclass(frozen=True)
class SequenceScannerResult:
    """What one pass did: stalled sequences ``released`` (their head run released)."""

    released: int = 0

    def summary(self) -> str | None:
        """One log line when the pass did something, else None."""
        if not self.released:
            return None
        return f"sequence safety net: released {self.released} stalled sequence(s)"


class SequenceScanner(MaintenanceService[SequenceScannerConfig]):
    """The sequence safety net; ``run_once(now=None)`` is one pass (see the module
    docstring)."""

    name = "sequence release"
    config_class = SequenceScannerConfig

    def run_once(self, now: datetime | None = None) -> SequenceScannerResult:
        """One pass (``now`` is not used: see the module docstring); returns its count."""
        with self.db.session() as s:
            keys = runs.run_list_stalled_sequences(s, batch=self.config.batch_size)
        released = 0
        for key in keys:
            with transaction(self.db, self.publish) as tx:
                released += advance.release_sequence(tx, key)
        return SequenceScannerResult(released)

"""The rate window pruner: deletes the ``cyclone_rate_windows`` rows of rate keys idle for
longer than their window (docs/flow-control.md).

The limited claim keeps one row per rate key, its claims of the last window; a row whose
last claim has left the window counts nothing, and a key that is never used again would
keep it forever. One guarded DELETE per pass removes such rows (a claim made meanwhile
keeps its row: the delete rechecks it). Any number of clients may prune at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cyclone_flow.db import rate_windows
from cyclone_flow.maintenance.base import MaintenanceService

__all__ = ["RateWindowPruner", "RateWindowPrunerConfig", "RateWindowPrunerResult"]

PRUNE_INTERVAL_S = 60.0
"""Default seconds between two passes (a pass is one small DELETE)."""


@dataclass(frozen=True)
class RateWindowPrunerConfig:
    """``interval_s`` between passes."""

    interval_s: float = PRUNE_INTERVAL_S


@dataclass(frozen=True)
class RateWindowPrunerResult:
    """What one pass did: the rate keys whose rows were ``deleted``."""

    deleted: tuple[str, ...] = ()

    def summary(self) -> str | None:
        """One log line when the pass did something, else None."""
        if not self.deleted:
            return None
        return f"rate window pruner: deleted the rows of {len(self.deleted)} idle rate key(s)"


class RateWindowPruner(MaintenanceService[RateWindowPrunerConfig]):
    """The rate window pruner; ``run_once(now=None)`` is one pass (see the module
    docstring)."""

    name = "rate window pruner"
    config_class = RateWindowPrunerConfig

    def run_once(self, now: datetime | None = None) -> RateWindowPrunerResult:
        """Delete the rows of the rate keys idle for longer than their window at ``now``
        (None: the database's clock)."""
        with self.db.session() as s:
            deleted = rate_windows.rate_window_delete_if_idle(s, now=now)
        return RateWindowPrunerResult(tuple(deleted))

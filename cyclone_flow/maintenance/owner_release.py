"""The owner release (isolated runs): hands the runs of a dead or stopped ``cyclone-flow
run`` process to every worker.

A run submitted with ``Client.submit(isolated=True)`` records its client id as the run's
``owner``, and each of its steps (and those of its child runs) as ``claim_owner``; the
generic claim skips those steps, the owner claims them through its run filter. Once the
owner's ``cyclone_workers`` row is gone (a clean shutdown deletes it) or not heartbeated
for one ``lease_ttl`` (a crash: the bound ``Client.workers()`` calls live), a pass clears
``owner`` and ``claim_owner`` and publishes the wakeups of the steps claimable now. Any
number of clients may run it at once: rows an engine transaction holds are skipped (SKIP
LOCKED) and left for the next pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cyclone_flow.db import runs, steps
from cyclone_flow.maintenance.base import MaintenanceService
from cyclone_flow.notify import Wakeups

__all__ = ["OwnerRelease", "OwnerReleaseConfig", "OwnerReleaseResult"]


@dataclass(frozen=True)
class OwnerReleaseConfig:
    """``interval_s``: seconds between two passes (the client's ``sweep_interval``)."""

    interval_s: float


@dataclass(frozen=True)
class OwnerReleaseResult:
    """What one pass did: the top ``runs`` released and the ``steps`` released."""

    runs: tuple[str, ...] = ()
    steps: int = 0

    def summary(self) -> str | None:
        """One log line when the pass did something, else None."""
        if not (self.runs or self.steps):
            return None
        return (
            f"owner release: {len(self.runs)} isolated run(s) and {self.steps} step(s) of "
            "stopped `cyclone-flow run` processes released to every worker"
        )


class OwnerRelease(MaintenanceService[OwnerReleaseConfig]):
    """The owner release; ``run_once(now=None)`` is one pass (see the module docstring)."""

    name = "owner release"
    config_class = OwnerReleaseConfig

    def run_once(self, now: datetime | None = None) -> OwnerReleaseResult:
        """Release the runs and steps whose owner has no live heartbeat row at ``now``
        (None: the database's clock), runs first (steps inserted later then inherit no
        owner); publish the wakeups of the steps claimable now."""
        with self.db.session() as s:
            released_runs = runs.run_disown_if_owner_gone(s, now=now)
        with self.db.session() as s:
            released = steps.step_disown_if_owner_gone(s, now=now)
        wakeups = Wakeups()
        wakeups.queues.update(r.queue for r in released if r.due)
        if wakeups.queues and self.publish is not None:
            self.publish(wakeups)
        return OwnerReleaseResult(tuple(released_runs), len(released))

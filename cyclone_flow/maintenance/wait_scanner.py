"""The wait scanner (Engine Design: Pool Budget names it among the tasks of every started
client; Client Options: WithMaxSignalWait): waiting ``child`` and ``wait_signal`` nodes
past their ``wait_until`` are discarded with error_kind ``timeout`` (a child run waited
for is cancelled with its tree); the node's dependents' ``on_dep_failure`` then applies as
for any discard.

One pass finds a batch without locks, then changes each node in its own transaction
(:func:`cyclone_flow.engine.tx.transaction`, which publishes its wakeups after the commit)
under the run lock, through a compare-and-swap guarded by the state and
``wait_until <= now``: many clients can scan at once, and a node decided meanwhile (a
signal arrived, the child finished) is a stale no-op. ``now`` is the database's clock
unless a test pins it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cyclone_flow.db import steps
from cyclone_flow.engine import fail
from cyclone_flow.engine.tx import transaction
from cyclone_flow.errors import StepTimeoutError
from cyclone_flow.events import StepEvent, cancelled_in
from cyclone_flow.maintenance.base import MaintenanceService
from cyclone_flow.states import ErrorKind, EventKind

__all__ = ["SCAN_BATCH", "SCAN_INTERVAL_S", "WaitScanner", "WaitScannerConfig", "WaitScannerResult"]

SCAN_INTERVAL_S = 10.0
"""Default seconds between two passes (a client uses ``ClientConfig.sweep_interval``)."""

SCAN_BATCH = 500
"""Default waits looked at per pass."""


@dataclass(frozen=True)
class WaitScannerConfig:
    """``interval_s`` between passes; ``batch_size`` waits looked at per pass."""

    interval_s: float = SCAN_INTERVAL_S
    batch_size: int = SCAN_BATCH


@dataclass(frozen=True)
class WaitScannerResult:
    """What one pass did: waits ``expired`` by this client."""

    expired: int = 0

    def summary(self) -> str | None:
        """One log line when the pass did something, else None."""
        return f"wait scanner: {self.expired} wait(s) expired" if self.expired else None


class WaitScanner(MaintenanceService[WaitScannerConfig]):
    """The wait scanner; ``run_once(now=None)`` is one pass (see the module docstring)."""

    name = "wait scanner"
    config_class = WaitScannerConfig

    def run_once(self, now: datetime | None = None) -> WaitScannerResult:
        """One pass at ``now`` (None: the database's clock); returns its counts."""
        expired = 0
        with self.db.session() as s:
            waits = steps.step_list_expired_waits(s, batch=self.config.batch_size, now=now)
        for wait in waits:
            run_id, node = wait.run_id, wait.node
            waited = "" if wait.waited_s is None else f" within {wait.waited_s:g}s"
            if wait.type == "wait_signal":
                message = f"signal {wait.signal!r} did not arrive{waited} (max_wait)"
            else:
                message = (
                    f"child run {wait.child_run_id} did not finish{waited} (max_wait); "
                    "it is cancelled"
                )
            with transaction(self.db, self.publish) as tx:
                done = fail.expire_wait(tx, run_id, node, message, now)
            if not done:
                continue  # decided meanwhile, or expired by another client
            expired += 1
            self.log.warning("node %s of run %s: %s", node, run_id, message)
            self.reporter.report(
                StepEvent(
                    EventKind.DISCARDED,
                    run_id,
                    node,
                    error=message,
                    error_kind=str(ErrorKind.TIMEOUT),
                ),
                cancelled=cancelled_in(tx.effects),
                engine=tx.effects.events,
                error=StepTimeoutError(run_id, node),
            )
        return WaitScannerResult(expired)

"""The wait scanner and the deadline scanner (Engine Design: Pool Budget names them among
the tasks of every started client; Client Options: WithMaxSignalWait).

Both run in the maintenance loop of every started client, after the recovery sweep. Each
is a ``run_once() -> count`` over a batch found without locks, then one transaction per
row that takes the run lock and changes the row only through a compare-and-swap guarded
by the expiry (``wait_until <= now()``, ``deadline_at <= now()``) and the state: many
clients can scan at once, and a row decided meanwhile (a signal arrived, the child
finished, the run completed) is a stale no-op, never a double transition. Time is the
database's ``now()``.
"""

from __future__ import annotations

from collections.abc import Callable

from cyclone_flow.config import ClientConfig
from cyclone_flow.errors import StepTimeoutError
from cyclone_flow.states import ErrorKind
from cyclone_flow.store.advance import Advance
from cyclone_flow.store.store import Store, Wakeups
from cyclone_flow.worker.events import (
    StepEvent,
    call_hook,
    emit_cancelled,
    emit_engine_events,
)

SCAN_BATCH = 500
"""Rows each scanner looks at per pass."""


def _report(config: ClientConfig, acc: Advance) -> None:
    emit_engine_events(config.logger, config.on_step_event, acc.events)
    for run_id in sorted({rid for rid, _ in acc.cancelled}):
        emit_cancelled(config.logger, config.on_step_event, run_id, acc.cancelled_in(run_id))


class WaitScanner:
    """Discards waiting child and wait_signal nodes past their ``wait_until`` with
    error_kind ``timeout`` (a child run waited for is cancelled with its tree); the
    node's dependents' ``on_dep_failure`` then applies as for any discard."""

    def __init__(
        self, store: Store, config: ClientConfig, publish: Callable[[Wakeups], None]
    ) -> None:
        self.store = store
        self.config = config
        self.publish = publish

    def run_once(self) -> int:
        """One pass; returns how many waits this client expired."""
        expired = 0
        for run_id, node, node_type, signal, child, waited_s in self.store.find_expired_waits(
            SCAN_BATCH
        ):
            waited = "" if waited_s is None else f" within {waited_s:g}s"
            if node_type == "wait_signal":
                message = f"signal {signal!r} did not arrive{waited} (max_wait)"
            else:
                message = f"child run {child} did not finish{waited} (max_wait); it is cancelled"
            acc = self.store.expire_wait(run_id, node, message)
            if acc is None:
                continue  # decided meanwhile, or expired by another client
            expired += 1
            self.publish(acc.wakeups)
            self.config.logger.warning("node %s of run %s: %s", node, run_id, message)
            event = StepEvent(
                "discarded", run_id, node, error=message, error_kind=str(ErrorKind.TIMEOUT)
            )
            call_hook(self.config.logger, self.config.on_step_event, event)
            call_hook(
                self.config.logger, self.config.error_handler, event, StepTimeoutError(run_id, node)
            )
            _report(self.config, acc)
        return expired


class DeadlineScanner:
    """Fails running runs past their flow's ``deadline`` with error_kind ``deadline``,
    cancelling their unfinished steps and child runs; a child run's parent node is
    discarded (kind ``child_failed``)."""

    def __init__(
        self, store: Store, config: ClientConfig, publish: Callable[[Wakeups], None]
    ) -> None:
        self.store = store
        self.config = config
        self.publish = publish

    def run_once(self) -> int:
        """One pass; returns how many runs this client failed."""
        failed = 0
        for run_id in self.store.find_past_deadline(SCAN_BATCH):
            result = self.store.fail_past_deadline(run_id)
            if result is None:
                continue  # finished meanwhile, or failed by another client
            acc, cancelled, error = result
            failed += 1
            self.publish(acc.wakeups)
            self.config.logger.warning("run %s failed: %s", run_id, error)
            emit_cancelled(self.config.logger, self.config.on_step_event, run_id, cancelled)
            _report(self.config, acc)
        return failed

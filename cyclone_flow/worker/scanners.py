"""The wait scanner, the deadline scanner (Engine Design: Pool Budget names them among the
tasks of every started client; Client Options: WithMaxSignalWait) and the sequence safety
net.

They run in the maintenance loop of every started client, after the recovery sweep. Each
is a ``run_once() -> count`` over a batch found without locks, then one transaction per
row (opened by :func:`cyclone_flow.engine.tx.transaction`, which publishes its wakeups after
the commit) that takes the run lock and changes the row only through a compare-and-swap
guarded by the expiry (``wait_until <= now()``, ``deadline_at <= now()``) and the state:
many clients can scan at once, and a row decided meanwhile (a signal arrived, the child
finished, the run completed) is a stale no-op, never a double transition. Time is the
database's ``now()``.
"""

from __future__ import annotations

from cyclone_flow.config import ClientConfig
from cyclone_flow.db import runs, steps
from cyclone_flow.db.conn import Database
from cyclone_flow.engine import advance, fail
from cyclone_flow.engine.tx import Effects, transaction
from cyclone_flow.errors import StepTimeoutError
from cyclone_flow.notify import Publish
from cyclone_flow.states import ErrorKind
from cyclone_flow.worker.events import (
    StepEvent,
    call_hook,
    emit_cancelled,
    emit_engine_events,
)

SCAN_BATCH = 500
"""Rows each scanner looks at per pass."""

SEQUENCE_BATCH = 100
"""Stalled sequences the safety net looks at per pass."""


def _report(config: ClientConfig, effects: Effects) -> None:
    emit_engine_events(config.logger, config.on_step_event, effects.events)
    for run_id in sorted({rid for rid, _ in effects.cancelled}):
        emit_cancelled(config.logger, config.on_step_event, run_id, effects.cancelled_in(run_id))


class WaitScanner:
    """Discards waiting child and wait_signal nodes past their ``wait_until`` with
    error_kind ``timeout`` (a child run waited for is cancelled with its tree); the
    node's dependents' ``on_dep_failure`` then applies as for any discard."""

    def __init__(self, db: Database, config: ClientConfig, publish: Publish) -> None:
        self.db = db
        self.config = config
        self.publish = publish

    def run_once(self) -> int:
        """One pass; returns how many waits this client expired."""
        expired = 0
        with self.db.session() as s:
            waits = steps.step_list_expired_waits(s, batch=SCAN_BATCH)
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
                done = fail.expire_wait(tx, run_id, node, message)
            if not done:
                continue  # decided meanwhile, or expired by another client
            expired += 1
            self.config.logger.warning("node %s of run %s: %s", node, run_id, message)
            event = StepEvent(
                "discarded", run_id, node, error=message, error_kind=str(ErrorKind.TIMEOUT)
            )
            call_hook(self.config.logger, self.config.on_step_event, event)
            call_hook(
                self.config.logger, self.config.error_handler, event, StepTimeoutError(run_id, node)
            )
            _report(self.config, tx.effects)
        return expired


class DeadlineScanner:
    """Fails running runs past their flow's ``deadline`` with error_kind ``deadline``,
    cancelling their unfinished steps and child runs; a child run's parent node is
    discarded (kind ``child_failed``)."""

    def __init__(self, db: Database, config: ClientConfig, publish: Publish) -> None:
        self.db = db
        self.config = config
        self.publish = publish

    def run_once(self) -> int:
        """One pass; returns how many runs this client failed."""
        failed = 0
        with self.db.session() as s:
            past = runs.run_list_past_deadline(s, batch=SCAN_BATCH)
        for run_id in past:
            with transaction(self.db, self.publish) as tx:
                result = fail.fail_past_deadline(tx, run_id)
            if result is None:
                continue  # finished meanwhile, or failed by another client
            cancelled, error = result
            failed += 1
            self.config.logger.warning("run %s failed: %s", run_id, error)
            emit_cancelled(self.config.logger, self.config.on_step_event, run_id, cancelled)
            _report(self.config, tx.effects)
        return failed


class SequenceScanner:
    """The safety net of sequences (see ``docs/queues.md``): releases the first open run of
    every sequence whose predecessors all finished but which is still held (e.g. the
    releasing transaction skipped it), one transaction per sequence."""

    def __init__(self, db: Database, publish: Publish, batch: int = SEQUENCE_BATCH) -> None:
        self.db = db
        self.publish = publish
        self.batch = batch

    def run_once(self) -> int:
        """One pass; returns how many sequences it released."""
        with self.db.session() as s:
            keys = runs.run_list_stalled_sequences(s, batch=self.batch)
        released = 0
        for key in keys:
            with transaction(self.db, self.publish) as tx:
                released += advance.release_sequence(tx, key)
        return released

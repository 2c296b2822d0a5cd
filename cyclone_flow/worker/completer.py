"""Group commit of step completions.

A worker thread whose handler returned without opening ``ctx.completion_tx()`` has no
business writes to commit with its step, so it hands ``(step, output)`` to its client's
one completer thread and goes back to work: its worker slot is free at once, while the
step's lease stays held (and renewed by the heartbeat) until the completion commits, as in
River's batch completer. The completer commits everything queued (up to
:data:`MAX_BATCH`) in ONE transaction
(:func:`cyclone_flow.engine.complete.complete_steps`): the run row locks of the batch in one
global order, one guarded UPDATE for all the steps, each run's advance,
one COMMIT, then one publication of the merged wakeups on the same connection; then it
settles each step (its events and hooks run on the completer thread). Nothing waits to
fill a batch: while one batch commits, the next gathers, so an idle client commits a lone
step at once and a busy one pays one commit (one WAL flush) for many steps. At most
:data:`MAX_BACKLOG` completions wait: a worker thread that would exceed it waits for room.

What stays per step, committed alone as before (Engine Design: ctx.CompletionTx()): a step
whose handler opened ``ctx.completion_tx()`` (its business writes commit with it and with
nothing else) and failed attempts. When a batch's transaction fails (a deadlock, a lost
connection, a bad row) nothing of it committed: the completer then commits each of its
steps alone, so one bad row cannot fail its neighbours. Every row stays guarded by its own
claim: a stale step of a batch is settled stale and the others complete. A crash before
the commit loses nothing but time: the leases lapse and the recovery sweep reclaims the
steps (Engine Design: Leases and Heartbeats).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from cyclone_flow.config import ClientConfig
from cyclone_flow.db.conn import Conn, Database
from cyclone_flow.db.rows import ClaimedStep
from cyclone_flow.engine import complete
from cyclone_flow.engine.tx import Outcome, Tx
from cyclone_flow.notify import Publish, Wakeups
from cyclone_flow.worker.cache import OutputCache

MAX_BATCH = 64
"""Most completions committed by one transaction (bounds its locks and its length)."""

MAX_BACKLOG = 256
"""Most completions waiting for the completer; beyond it a worker thread waits for room."""

Settle = Callable[["Outcome | Exception | None"], None]
"""Called once per handed-over step on the completer thread: its committed Outcome, None
when it was stale (nothing of it written), or the database error that prevented its
completion when it was committed alone."""


class _Pending:
    __slots__ = ("output", "settle", "step")

    def __init__(self, step: ClaimedStep, output: str, settle: Settle) -> None:
        self.step = step
        self.output = output
        self.settle = settle


class Completer:
    """The client's completer thread (group commit); see the module docstring.

    ``publish(wakeups, conn)`` publishes after a commit on the idle ``conn``; ``tx_slots``
    is the client's completion-transaction semaphore (a batch is one completion
    transaction: Engine Design: Pool Budget). Counters for benchmarks and tests:
    ``batches`` committed, ``steps`` completed in them, ``alone`` steps committed alone
    after their batch failed.
    """

    def __init__(
        self,
        db: Database,
        config: ClientConfig,
        cache: OutputCache,
        publish: Publish,
        tx_slots: threading.BoundedSemaphore,
        max_batch: int = MAX_BATCH,
        max_backlog: int = MAX_BACKLOG,
    ) -> None:
        self.db = db
        self.owner = config.client_id
        self.cache = cache
        self.publish = publish
        self.tx_slots = tx_slots
        self.max_batch = max_batch
        self.max_backlog = max(max_batch, max_backlog)
        self.log = config.logger
        self.batches = 0
        self.steps = 0
        self.alone = 0
        self._cond = threading.Condition()
        self._queue: list[_Pending] = []
        self._running = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the completer thread; returns at once."""
        with self._cond:
            if self._running:
                return
            self._running = True
        self._thread = threading.Thread(target=self._loop, name="cyclone-completer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Commit and settle what is queued (waiting up to ``timeout`` seconds), then stop;
        a later :meth:`submit` returns False."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def pending(self) -> int:
        """How many handed-over completions are not committed yet (queued)."""
        with self._cond:
            return len(self._queue)

    def submit(self, step: ClaimedStep, output_json: str, settle: Settle) -> bool:
        """Queue the completion of ``step`` with ``output_json`` (JSON text); ``settle``
        is called once it committed (or turned out stale). Waits while the backlog is
        full. Returns False, queueing nothing, when the completer is stopped: the caller
        then commits the step alone (:func:`cyclone_flow.engine.complete.complete_step`)."""
        with self._cond:
            while self._running and len(self._queue) >= self.max_backlog:
                self._cond.wait()
            if not self._running:
                return False
            self._queue.append(_Pending(step, output_json, settle))
            self._cond.notify_all()
        return True

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and self._running:
                    self._cond.wait()
                if not self._queue:
                    return  # stopped and drained
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
                self._cond.notify_all()  # room for worker threads waiting on the backlog
            results = self._commit(batch)
            for pending, result in zip(batch, results, strict=True):
                try:
                    pending.settle(result)
                except Exception:  # a settle callback must never stop the completer
                    self.log.exception("settling the completion of step %s", pending.step.id)

    def _commit(self, batch: list[_Pending]) -> list[Outcome | Exception | None]:
        """Commit ``batch`` in one transaction; when that fails, each step alone."""
        try:
            outcomes = self._transact(batch)
            self.batches += 1
            return list(outcomes)
        except Exception as exc:
            if len(batch) == 1:
                return [exc]  # its own error settles a lone step
            self.log.warning(
                "group commit of %d completions failed; committing each alone",
                len(batch),
                exc_info=True,
            )
        return [self._commit_alone(p) for p in batch]

    def _commit_alone(self, pending: _Pending) -> Outcome | Exception | None:
        """One step in its own transaction (after its batch failed): its Outcome, None when
        stale, or the error that prevented it."""
        try:
            [outcome] = self._transact([pending])
            self.alone += 1
            return outcome
        except Exception as exc:
            return exc

    def _transact(self, batch: list[_Pending]) -> list[Outcome | None]:
        """One transaction for ``batch`` (:meth:`complete_steps`), then the work after its
        commit; raises what the transaction raised (nothing committed then)."""
        with self.tx_slots, self.db.pool.connection() as conn:
            with conn.transaction():
                outcomes = self.complete_steps(
                    Tx(conn, self.db.q), [(p.step, p.output) for p in batch]
                )
            self._committed(conn, batch, outcomes)
        return outcomes

    def complete_steps(
        self, tx: Tx, batch: Sequence[tuple[ClaimedStep, str]]
    ) -> list[Outcome | None]:
        """The group commit of ``batch`` (``(step, output_json)`` pairs) in ``tx``
        (:func:`cyclone_flow.engine.complete.complete_steps` for this client); a method so
        that tests can inject faults into one completer."""
        return complete.complete_steps(tx, self.owner, batch)

    def _committed(self, conn: Conn, batch: list[_Pending], outcomes: list[Outcome | None]) -> None:
        """After the commit: fill the output cache, publish the merged wakeups on the
        connection that committed them. Errors are logged, never raised: the batch is
        committed whatever happens here."""
        try:
            wakeups = Wakeups()
            for pending, outcome in zip(batch, outcomes, strict=True):
                if outcome is None:
                    continue
                self.steps += 1
                wakeups.merge(outcome.wakeups)
                text = outcome.output_text
                step = pending.step
                if step.parent_node is None and text is not None:
                    # a downstream step this client claims reads the output from the cache
                    self.cache.put((step.run_id, step.node), text, len(text.encode("utf-8")))
            self.publish(wakeups, conn)
        except Exception:
            self.log.exception("after the group commit of %d completion(s)", len(batch))

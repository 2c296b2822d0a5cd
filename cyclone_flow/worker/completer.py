"""Group commit of step completions (issue 8).

A worker thread whose handler returned without opening ``ctx.completion_tx()`` has no
business writes to commit with its step, so it hands ``(step, output)`` to its client's
one completer thread and waits. The completer commits everything queued (up to
:data:`MAX_BATCH`) in ONE transaction (:meth:`Store.complete_steps`): the run row locks of
the batch in one global order, one guarded UPDATE for all the steps, each run's advance,
one COMMIT, then one publication of the merged wakeups on the same connection. Nothing
waits to fill a batch: while one batch commits, the next gathers, so an idle client
commits a lone step at once and a busy one pays one commit (one WAL flush) for many steps.

What stays per step, committed alone as before (Engine Design: ctx.CompletionTx()): a step
whose handler opened ``ctx.completion_tx()`` (its business writes commit with it and with
nothing else), failed attempts, and every step of a batch whose transaction failed (a
deadlock, a lost connection, a bad row): those are handed back and each commits alone, so
one bad row cannot fail its neighbours and nothing is lost. Every row stays guarded by its
own claim: a stale step in a batch is reported stale and the others complete.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg

from cyclone_flow.config import ClientConfig
from cyclone_flow.store.store import ClaimedStep, Outcome, Store, Wakeups
from cyclone_flow.worker.cache import OutputCache

Conn = psycopg.Connection[Any]

MAX_BATCH = 64
"""Most completions committed by one transaction (bounds its locks and its length)."""


class CommitAlone:
    """The result that tells a worker thread to commit its completion alone (the
    completer is stopped, or the batch's transaction failed)."""


ALONE = CommitAlone()


class _Pending:
    __slots__ = ("done", "output", "result", "step")

    def __init__(self, step: ClaimedStep, output: str) -> None:
        self.step = step
        self.output = output
        self.done = threading.Event()
        self.result: Outcome | CommitAlone | None = ALONE


class Completer:
    """The client's completer thread (group commit); see the module docstring.

    ``publish(wakeups, conn)`` publishes after a commit on the idle ``conn``; ``tx_slots``
    is the client's completion-transaction semaphore (a batch is one completion
    transaction: Engine Design: Pool Budget). Counters for benchmarks and tests:
    ``batches`` committed and ``steps`` in them.
    """

    def __init__(
        self,
        store: Store,
        config: ClientConfig,
        cache: OutputCache,
        publish: Callable[[Wakeups, Conn | None], None],
        tx_slots: threading.BoundedSemaphore,
        max_batch: int = MAX_BATCH,
    ) -> None:
        self.store = store
        self.owner = config.client_id
        self.cache = cache
        self.publish = publish
        self.tx_slots = tx_slots
        self.max_batch = max_batch
        self.log = config.logger
        self.batches = 0
        self.steps = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[_Pending] = []
        self._running = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the completer thread; returns at once."""
        with self._lock:
            if self._running:
                return
            self._running = True
        self._thread = threading.Thread(target=self._loop, name="cyclone-completer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Commit what is queued, then stop; a later :meth:`complete` returns ``ALONE``."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def complete(self, step: ClaimedStep, output_json: str) -> Outcome | CommitAlone | None:
        """Commit the completion of ``step`` with ``output_json`` (JSON text) in the next
        batch and wait for it: the committed Outcome, None when the step was stale (its
        lease is lost: nothing of it was written), or ``ALONE`` when the caller must
        commit it on its own (:meth:`Store.complete_step`)."""
        pending = _Pending(step, output_json)
        with self._cond:
            if not self._running:
                return ALONE
            self._queue.append(pending)
            self._cond.notify()
        pending.done.wait()
        return pending.result

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and self._running:
                    self._cond.wait()
                if not self._queue:
                    return  # stopped and drained
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
            try:
                self._commit(batch)
            finally:
                for pending in batch:
                    pending.done.set()

    def _commit(self, batch: list[_Pending]) -> None:
        committed = False
        try:
            with self.tx_slots, self.store.pool.connection() as conn:
                with conn.transaction():
                    outcomes = self.store.complete_steps(
                        conn, self.owner, [(p.step, p.output) for p in batch]
                    )
                committed = True
                for pending, outcome in zip(batch, outcomes, strict=True):
                    pending.result = outcome
                self._committed(conn, batch, outcomes)
        except Exception:
            if committed:
                self.log.exception("after the group commit of %d completion(s)", len(batch))
            else:  # nothing of the batch committed: every step commits alone
                self.log.warning(
                    "group commit of %d completion(s) failed; committing each alone",
                    len(batch),
                    exc_info=True,
                )

    def _committed(self, conn: Conn, batch: list[_Pending], outcomes: list[Outcome | None]) -> None:
        """After the commit: fill the output cache, publish the merged wakeups on the
        connection that committed them."""
        self.batches += 1
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

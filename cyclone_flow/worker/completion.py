"""The one completion path of a worker (River's ``JobCompleter``): the executor hands a
step whose handler returned to a :class:`CompletionSink`, and every sink delivers what its
commit did to the same :class:`Settler`.

Two sinks:

- :class:`InlineSink` commits at once, in the step's own completion transaction: for a
  handler that opened ``ctx.completion_tx()`` (its business writes commit with its step
  and with nothing else; Engine Design: ctx.CompletionTx()), and whenever the batch sink
  does not take a step.
- :class:`BatchSink` (the group commit) takes the steps of handlers that did not open it:
  the worker thread goes back to work at once while the step's lease stays held (and
  renewed by the heartbeat), and the client's one completer thread commits everything
  queued (up to :data:`MAX_BATCH`) in ONE transaction
  (:func:`cyclone_flow.engine.complete.complete_steps`): the batch's run row locks in one
  global order, one guarded UPDATE for all the steps, each run's advance, one COMMIT.
  Nothing waits to fill a batch: while one batch commits, the next gathers, so an idle
  client commits a lone step at once and a busy one pays one commit (one WAL flush) for
  many steps. At most :data:`MAX_BACKLOG` completions wait: a worker thread that would
  exceed it waits for room. When a batch's transaction fails (a deadlock, a lost
  connection, a bad row) nothing of it committed: each of its steps is then committed
  alone, so one bad row cannot fail its neighbours.

After a commit, on the connection that committed, :meth:`Settler.committed` fills the
output cache and publishes the wakeups (once per transaction, through the client's one
publisher); then :meth:`Settler.settle` settles each step: its events (through the one
:class:`~cyclone_flow.events.Reporter`), or the stale case (nothing of it was written:
the lease was lost or its timeout passed, which then records a ``timeout`` attempt), or
the failed attempt when the transaction itself failed. Every row stays guarded by its own
claim. A crash before the commit loses nothing but time: the leases lapse and the recovery
sweep reclaims the steps (Engine Design: Leases and Heartbeats).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import psycopg

from cyclone_flow import tracing
from cyclone_flow.db.conn import (
    CONFLICT_RETRIES,
    Conn,
    Database,
    conflict,
    retry_conflicts,
)
from cyclone_flow.db.errors import database_lost, prepared_statement_lost
from cyclone_flow.db.rows import ClaimedStep, LimitedClaim
from cyclone_flow.db.steps import FailParams
from cyclone_flow.engine import complete, fail
from cyclone_flow.engine.tx import Outcome, Tx
from cyclone_flow.errors import CycloneError, IsolationLevelError, StepTimeoutError
from cyclone_flow.events import Reporter, StepEvent
from cyclone_flow.logs import step_extra
from cyclone_flow.notify import Publish, Wakeups
from cyclone_flow.states import ErrorKind, EventKind, RunState, StepState
from cyclone_flow.worker.cache import OutputCache
from cyclone_flow.worker.context import CompletionTx
from cyclone_flow.worker.step_failure import StepFailure

__all__ = [
    "MAX_BACKLOG",
    "MAX_BATCH",
    "BatchSink",
    "Completion",
    "CompletionSink",
    "InlineSink",
    "Settler",
    "StepFailure",
]

MAX_BATCH = 64
"""Most completions committed by one transaction of the batch sink (bounds its locks and
its length)."""

MAX_BACKLOG = 256
"""Most completions waiting for the batch sink; beyond it a worker thread waits for room."""

FAILED = "the completion transaction failed"
FAILED_AT_COMMIT = "the completion transaction failed at commit"

_EVENT_KIND = {
    StepState.COMPLETED: EventKind.COMPLETED,
    StepState.AVAILABLE: EventKind.RETRY_SCHEDULED,
    StepState.DISCARDED: EventKind.DISCARDED,
}


def outcome_name(outcome: Outcome | None) -> str:
    """What a committed transition did to its step, as its event kind (``completed``,
    ``retry_scheduled``, ``discarded``...; ``stale`` for None): a trace's
    ``cyclone.outcome``."""
    if outcome is None:
        return "stale"
    return str(_EVENT_KIND.get(outcome.step_state) or outcome.step_state)


Result = Outcome | Exception | None
"""What committing one step did: its committed Outcome, None when it was stale (nothing of
it written), or the error that prevented its commit."""


class Completion:
    """One step whose handler returned: its ``output`` (JSON text), the handler's
    ``duration_s``, and for the inline sink the step's completion transaction ``tx`` with
    the ``extra`` wakeups of the runs the handler submitted in it; ``done`` is called once
    the step is settled (the worker then drops its lease)."""

    __slots__ = ("done", "duration_s", "extra", "output", "step", "trace", "tx")

    def __init__(
        self,
        step: ClaimedStep,
        output: str,
        duration_s: float | None,
        tx: CompletionTx | None = None,
        extra: Wakeups | None = None,
        done: Callable[[], None] | None = None,
        trace: tracing.Attempt = tracing.NO_ATTEMPT,
    ) -> None:
        self.step = step
        self.output = output
        self.duration_s = duration_s
        self.tx = tx
        self.extra = extra
        self.done = done
        self.trace = trace  # the attempt's spans, ended when it is settled


class CompletionSink(Protocol):
    """Where the executor hands a completion (River's ``JobCompleter``)."""

    def complete(self, completion: Completion) -> bool:
        """Commit ``completion`` now or later, then settle it (:meth:`Settler.settle`);
        False when this sink does not take it (nothing happened: commit it elsewhere)."""
        ...


class Settler:
    """What follows a completion's commit, the same for every sink (see the module
    docstring); also records failed attempts (:meth:`fail`).

    ``owner`` is the client id; ``publish(wakeups, conn)`` publishes after a commit on
    the idle ``conn``; ``tx_slots`` bounds the client's completion transactions (a failed
    attempt's transaction takes a slot too: Engine Design: Pool Budget)."""

    def __init__(
        self,
        db: Database,
        owner: str,
        cache: OutputCache,
        publish: Publish,
        tx_slots: threading.BoundedSemaphore,
        reporter: Reporter,
        logger: logging.Logger,
    ) -> None:
        self.db = db
        self.owner = owner
        self.cache = cache
        self.publish = publish
        self.tx_slots = tx_slots
        self.reporter = reporter
        self.log = logger

    def committed(
        self, conn: Conn, steps: Sequence[ClaimedStep], outcomes: Sequence[Outcome | None]
    ) -> None:
        """Right after the commit of ``steps`` (one outcome each, None when stale), on the
        connection that committed them: fill the output cache (a downstream step this
        client claims reads the output from it, as the database stores it) and publish
        their wakeups, once (with the queues of the limited steps among them: each freed
        a slot of its key). Errors are logged, never raised: the commit happened."""
        try:
            wakeups: Wakeups | None = None
            merged = False
            for step, outcome in zip(steps, outcomes, strict=True):
                if outcome is None:
                    continue
                text = outcome.output_text
                if step.parent_node is None and text is not None:
                    self.cache.put((step.run_id, step.node), text, len(text.encode("utf-8")))
                if wakeups is None:
                    wakeups = outcome.wakeups
                    continue
                if not merged:
                    first, wakeups, merged = wakeups, Wakeups(), True
                    wakeups.merge(first)
                wakeups.merge(outcome.wakeups)
            # a limited step that ended freed a slot of its key: wake its queue's claimers
            freed = {
                s.queue
                for s, o in zip(steps, outcomes, strict=True)
                if o is not None and isinstance(s, LimitedClaim)
            }
            if freed:
                extra = Wakeups(queues=freed)
                if wakeups is not None:
                    extra.merge(wakeups)
                wakeups = extra
            if wakeups is not None:
                self.publish(wakeups, conn)
        except Exception:
            self.log.exception("after the commit of %d completion(s)", len(outcomes))

    def settle(self, completion: Completion, result: Result, what: str = FAILED) -> None:
        """After the commit (or its failure): report the committed step, or handle it as
        stale, or record the failed attempt when ``result`` is the error of its
        transaction (``what`` names where it failed); then ``completion.done()``. Never
        raises: trouble recording the result leaves the step to its lease."""
        step = completion.step
        trace = completion.trace
        try:
            if isinstance(result, Exception):
                trace.finish("failed", error=result)
                self._completion_failed(step, result, completion.duration_s, what)
            elif result is None:
                trace.finish("stale")
                self.stale(step)
            else:
                trace.finish(outcome_name(result))
                self.report(step, result, None, completion.duration_s)
        except BaseException as exc:
            self.reporter.trouble(
                "completion",
                exc,
                "step %s of run %s: could not record the result; the lease will lapse and "
                "the recovery sweep reclaims it",
                step.node,
                step.run_id,
                extra=_extra(step),
            )
        finally:
            trace.finish("lost")  # a no-op when finished above
            if completion.done is not None:
                completion.done()

    def _completion_failed(
        self, step: ClaimedStep, exc: Exception, duration_s: float | None, what: str
    ) -> None:
        """A database error of the completion transaction itself fails the attempt (a
        handler that changed its isolation fails it permanently); trouble with the
        connection or server (raised again) leaves the step to its lease."""
        try:
            if isinstance(exc, IsolationLevelError):
                failure = StepFailure(ErrorKind.HANDLER_ERROR, str(exc), permanent=True, tb=None)
                raise failure from exc
            with failed_attempt_on_error(what):
                raise exc
        except StepFailure as failure:
            self.fail(step, self.owner, failure, duration_s)

    def stale(self, step: ClaimedStep) -> None:
        """The step's completion was stale (nothing of it was written): say so, and record
        a timeout when its deadline passed under this lease."""
        self.log.info(
            "step %s of run %s: stale completion not written (lease lost or timed out)",
            step.node,
            step.run_id,
            extra=_extra(step),
        )
        self._fail_timed_out(step)

    def _fail_timed_out(self, step: ClaimedStep) -> None:
        """After a stale result of a step with a timeout: fail the attempt with kind
        ``timeout`` when its deadline passed under this very lease (else nothing)."""
        if step.timeout_s is None:
            return
        timeout = StepTimeoutError(step.run_id, step.node)
        failure = StepFailure(
            ErrorKind.TIMEOUT,
            "step timed out (started_at + timeout passed)",
            permanent=False,
            tb=None,
        )
        failure.__cause__ = timeout
        self.fail(step, None, failure)

    def fail(
        self,
        step: ClaimedStep,
        owner: str | None,
        failure: StepFailure,
        duration_s: float | None = None,
    ) -> Outcome | None:
        """Record the failed attempt of ``step`` in a transaction of its own (committed,
        its wakeups published), then report it (``error_handler`` gets the handler's own
        exception, or the engine's typed error). ``owner`` None: a timeout found after a
        stale result, guarded by the generation and the deadline only. Returns what was
        committed (None: stale, nothing written for this lease)."""
        timed_out = failure.kind is ErrorKind.TIMEOUT
        attempt = FailParams(
            step_id=step.id,
            run_id=step.run_id,
            generation=step.lease_generation,
            owner=owner,
            error=str(failure),
            error_kind=failure.kind,
            traceback=failure.tb,
            permanent=failure.permanent,
            timed_out=timed_out,
        )
        with self.tx_slots:
            outcome, backoff_error = retry_conflicts(
                lambda: fail.fail_step_alone(self.db, self.publish, attempt)
            )
        if backoff_error is not None:
            self.log.error(
                "step %s of run %s: its retry backoff could not be computed (%s); the "
                "attempt is recorded without backoff",
                step.node,
                step.run_id,
                backoff_error,
                extra=_extra(step),
            )
        if outcome is None:
            if timed_out:
                return None  # after a stale result, which its caller has told (once)
            self.log.info(
                "step %s of run %s: stale failure ignored",
                step.node,
                step.run_id,
                extra=_extra(step),
            )
            self._fail_timed_out(step)
            return None
        self.log.warning(
            "step %s of run %s attempt %d failed (%s): %s",
            step.node,
            step.run_id,
            step.attempt,
            failure.kind,
            failure,
            extra=_extra(step, "attempt_failed"),
        )
        # the handler's own exception (or the engine's typed error), never the internal
        # StepFailure wrapper
        cause = failure.__cause__
        self.report(
            step,
            outcome,
            failure,
            duration_s,
            cause if cause is not None else CycloneError(str(failure)),
        )
        return outcome

    def report(
        self,
        step: ClaimedStep,
        outcome: Outcome,
        failure: StepFailure | None = None,
        duration_s: float | None = None,
        error: BaseException | None = None,
    ) -> None:
        """Report a committed (and published) transition of ``step``: its step event, the
        steps it cancelled, the nodes the engine decided, the error handler's call for a
        failure (``error``), and the run's end in the log."""
        event = StepEvent(
            _EVENT_KIND.get(outcome.step_state) or EventKind(outcome.step_state),
            step.run_id,
            step.node,
            step.id,
            step.attempt,
            str(failure) if failure else None,
            str(failure.kind) if failure else None,
            step.queue,
            duration_s,
        )
        run_id = step.run_id
        self.reporter.report(
            event,
            cancelled=[(run_id, node) for node in outcome.cancelled] if outcome.cancelled else (),
            engine=outcome.engine_events,
            error=error,
        )
        if outcome.run_state is not None:
            level = self.log.info if outcome.run_state is RunState.COMPLETED else self.log.warning
            level("run %s %s", run_id, outcome.run_state, extra=_extra(step, "run_ended"))


class InlineSink:
    """Commits a completion at once in the step's own completion transaction
    (``completion.tx``, with the handler's business writes), then settles it; it takes
    every completion."""

    def __init__(self, db: Database, owner: str, settler: Settler) -> None:
        self.db = db
        self.owner = owner
        self.settler = settler

    def complete(self, completion: Completion) -> bool:
        """Commit and settle ``completion`` on this thread; always True.

        When the handler used the transaction (``ctx.completion_tx()``), the same round
        trip checks that it is still READ COMMITTED (else the step fails permanently:
        :class:`~cyclone_flow.errors.IsolationLevelError`). A transaction that held
        nothing of the handler's and meets a serialization failure or a deadlock runs
        again at once (up to ``CONFLICT_RETRIES`` times)."""
        tx = completion.tx
        assert tx is not None, "the inline sink commits in the step's completion transaction"
        step = completion.step
        redo = CONFLICT_RETRIES - 1 if tx.conn is None else 0  # nothing of the handler's in it
        while True:
            what = FAILED
            result: Result
            try:
                conn = tx.open()
                outcome = complete.complete_step(
                    Tx(conn, self.db.q),
                    step,
                    self.owner,
                    completion.output,
                    check_isolation=tx.handed,
                )
                if outcome is None:
                    tx.rollback()  # stale: the handler's business writes go with it
                else:
                    if completion.extra:
                        outcome.wakeups.merge(completion.extra)  # published with its own
                    what = FAILED_AT_COMMIT
                    tx.commit(functools.partial(self._committed, step, outcome))
                result = outcome
            except Exception as exc:
                tx.rollback()
                if redo > 0 and conflict(exc):
                    redo -= 1
                    continue
                result = exc
            except BaseException:
                tx.rollback()
                raise
            break
        self.settler.settle(completion, result, what)
        return True

    def _committed(self, step: ClaimedStep, outcome: Outcome, conn: Conn) -> None:
        self.settler.committed(conn, (step,), (outcome,))


class BatchSink:
    """The group commit (see the module docstring): :meth:`complete` queues, the
    completer thread (started with :meth:`start`) commits and settles.

    ``tx_slots`` is the client's completion-transaction semaphore (a batch is one
    completion transaction: Engine Design: Pool Budget). Counters for benchmarks and
    tests: ``batches`` committed, ``steps`` completed in them, ``alone`` steps committed
    alone after their batch failed.
    """

    def __init__(
        self,
        db: Database,
        owner: str,
        tx_slots: threading.BoundedSemaphore,
        logger: logging.Logger,
        max_batch: int = MAX_BATCH,
        max_backlog: int = MAX_BACKLOG,
    ) -> None:
        self.db = db
        self.owner = owner
        self.tx_slots = tx_slots
        self.log = logger
        self.max_batch = max_batch
        self.max_backlog = max(max_batch, max_backlog)
        self.settler: Settler | None = None
        self.batches = 0
        self.steps = 0
        self.alone = 0
        self._cond = threading.Condition()
        self._queue: list[Completion] = []
        self._running = False
        self._thread: threading.Thread | None = None

    def start(self, settler: Settler) -> None:
        """Start the completer thread, which settles through ``settler``; returns at
        once."""
        with self._cond:
            if self._running:
                return
            self.settler = settler
            self._running = True
        self._thread = threading.Thread(target=self._loop, name="cyclone-completer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Commit and settle what is queued (waiting up to ``timeout`` seconds), then stop;
        a later :meth:`complete` returns False."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def pending(self) -> int:
        """How many handed-over completions are not committed yet (queued)."""
        with self._cond:
            return len(self._queue)

    def complete(self, completion: Completion) -> bool:
        """Queue ``completion`` (it has no transaction of its own); it is settled once it
        committed (or turned out stale). Waits while the backlog is full. Returns False,
        queueing nothing, when the completer is stopped (or not started): the caller then
        commits the step through the inline sink."""
        with self._cond:
            while self._running and len(self._queue) >= self.max_backlog:
                self._cond.wait()
            if not self._running:
                return False
            self._queue.append(completion)
            self._cond.notify_all()
        return True

    def _loop(self) -> None:
        settler = self.settler
        assert settler is not None
        while True:
            with self._cond:
                while not self._queue and self._running:
                    self._cond.wait()
                if not self._queue:
                    return  # stopped and drained
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
                self._cond.notify_all()  # room for worker threads waiting on the backlog
            results = self._commit(settler, batch)
            for completion, result in zip(batch, results, strict=True):
                settler.settle(completion, result)

    def _commit(self, settler: Settler, batch: list[Completion]) -> list[Result]:
        """Commit ``batch`` in one transaction; when that fails, each step alone."""
        try:
            outcomes = self._transact(settler, batch)
            self.batches += 1
            return list(outcomes)
        except Exception as exc:
            if len(batch) == 1:
                return [exc]  # its own error settles a lone step
            if database_lost(exc) or prepared_statement_lost(exc):  # no traceback: not a bug
                settler.reporter.trouble(
                    "completion",
                    exc,
                    "group commit of %d completions failed; committing each alone",
                    len(batch),
                )
            else:
                self.log.warning(
                    "group commit of %d completions failed; committing each alone",
                    len(batch),
                    exc_info=True,
                )
        return [self._commit_alone(settler, c) for c in batch]

    def _commit_alone(self, settler: Settler, completion: Completion) -> Result:
        """One step in its own transaction (after its batch failed): its Outcome, None when
        stale, or the error that prevented it."""
        try:
            [outcome] = self._transact(settler, [completion])
            self.alone += 1
            return outcome
        except Exception as exc:
            return exc

    def _transact(self, settler: Settler, batch: list[Completion]) -> list[Outcome | None]:
        """One READ COMMITTED transaction for ``batch`` (:meth:`complete_steps`; run again
        at once after a serialization failure or a deadlock, and begun on a fresh
        connection when the first one is found lost), then the work after its commit on
        the same connection; raises what the transaction raised (nothing committed
        then)."""
        steps = [c.step for c in batch]
        pairs = [(c.step, c.output) for c in batch]
        traces = [c.trace for c in batch]

        def once() -> list[Outcome | None]:
            outcomes: list[Outcome | None] = []

            def after(conn: Conn) -> None:
                self.steps += len(outcomes) - outcomes.count(None)
                settler.committed(conn, steps, outcomes)

            with (
                tracing.group_commit_span(traces),
                self.db.transaction(after=after) as conn,
            ):
                outcomes.extend(self.complete_steps(Tx(conn, self.db.q), pairs))
            return outcomes

        with self.tx_slots:
            return retry_conflicts(once)

    def complete_steps(
        self, tx: Tx, batch: Sequence[tuple[ClaimedStep, str]]
    ) -> list[Outcome | None]:
        """The group commit of ``batch`` (``(step, output_json)`` pairs) in ``tx``
        (:func:`cyclone_flow.engine.complete.complete_steps` for this client); a method so
        that tests can inject faults into one sink."""
        return complete.complete_steps(tx, self.owner, batch)


@contextmanager
def failed_attempt_on_error(what: str) -> Iterator[None]:
    """Turn a database error of the step's own transaction into a failed attempt (e.g. the
    handler left its transaction failed, or a deferred constraint broke), so it can never
    loop. Trouble with the connection or server itself (OperationalError, but not a
    deadlock or serialization failure; :func:`~cyclone_flow.db.conn.database_lost` says
    which of them are the database out of reach) and a prepared statement of the engine's
    that the server does not have (:func:`~cyclone_flow.db.errors.prepared_statement_lost`:
    a pooler in transaction mode) propagate: the step is left to its lease."""
    try:
        yield
    except psycopg.Error as exc:
        if (
            isinstance(exc, psycopg.OperationalError)
            and not isinstance(exc, psycopg.errors.TransactionRollback)
        ) or prepared_statement_lost(exc):
            raise
        raise StepFailure(
            ErrorKind.HANDLER_ERROR,
            f"{what}: {type(exc).__name__}: {exc}",
            permanent=isinstance(exc, psycopg.DataError),
            tb=None,
        ) from exc


def _extra(step: ClaimedStep, event: str | None = None) -> dict[str, Any]:
    return step_extra(step.run_id, step.node, step.attempt, event)

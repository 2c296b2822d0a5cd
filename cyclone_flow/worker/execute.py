"""Execute one claimed step: resolve the handler and its input, call it, then hand the
output to a completion sink (:mod:`cyclone_flow.worker.completion`) or record the failed
attempt.

A worker can die at any line here: nothing is final until the completion transaction
commits, and a lost lease turns every late write into a stale, rolled-back transaction
(Engine Design: CAS State Transitions, ctx.CompletionTx()).
"""

from __future__ import annotations

import contextvars
import importlib
import inspect
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from cyclone_flow import tracing
from cyclone_flow._json import JSON, Unencodable, encode_payload
from cyclone_flow.config import ClientConfig
from cyclone_flow.db.conn import Database, retry_conflicts
from cyclone_flow.db.errors import database_lost
from cyclone_flow.db.rows import ClaimedStep
from cyclone_flow.engine.fail import give_back_step_alone
from cyclone_flow.errors import (
    HandlerImportError,
    PayloadTooLargeError,
    PermanentError,
    TemplateError,
)
from cyclone_flow.events import Reporter
from cyclone_flow.handlers import HandlerResolver
from cyclone_flow.inserter import Inserter
from cyclone_flow.logs import step_extra
from cyclone_flow.notify import Publish, Wakeups
from cyclone_flow.options import run_options
from cyclone_flow.states import ErrorKind
from cyclone_flow.worker import step_logs
from cyclone_flow.worker.aio import EventLoop, HandlerCancelled
from cyclone_flow.worker.cache import OutputCache
from cyclone_flow.worker.completion import (
    BatchSink,
    Completion,
    InlineSink,
    Settler,
    StepFailure,
    outcome_name,
)
from cyclone_flow.worker.context import CompletionTx, Context
from cyclone_flow.worker.give_back import (
    GIVE_BACK_DELAY_S,
    CallBackoff,
    GiveBack,
    gives_back,
    reason_text,
)
from cyclone_flow.worker.step_input import Inputs
from cyclone_flow.worker.step_logs import AttemptLog, StepLogs

__all__ = ["Executor"]

_TRACEBACK_LIMIT = 8_000  # characters of traceback kept per attempt (the last ones)
_ERROR_LIMIT = 4_000  # characters of error message kept per attempt (the first ones)
PREPARE_TRIES = 3  # reads of a step's input tried when they lose the database


class Executor:
    """Runs claimed steps on the caller's thread; shared by all worker threads.

    ``completer``: the client's batch sink (group commit), or None to commit every step
    inline. ``reporter`` (built from ``config``'s hooks and ``on_database_error``, called
    with where a connection-level failure happened) reports every event of this client's
    worker; ``settler`` is the one settle path of both sinks. ``give_back``: a step whose
    call this worker cannot import, or may not run, goes back to the queue for another
    worker (docs/failures.md); False (``cyclone-flow run``'s own run, which no other worker
    takes): it fails at once with ``import_error``."""

    def __init__(
        self,
        db: Database,
        config: ClientConfig,
        resolver: HandlerResolver,
        cache: OutputCache,
        tx_slots: threading.BoundedSemaphore,
        publish: Publish,
        inserter: Inserter,
        completer: BatchSink | None = None,
        on_database_error: Callable[[str], None] | None = None,
        give_back: bool = True,
    ) -> None:
        self.db = db
        self.config = config
        self.resolver = resolver
        self.tx_slots = tx_slots
        self.inserter = inserter
        self.log = config.logger
        self.inputs = Inputs(db, cache)
        self.reporter = Reporter(
            config.logger, config.on_step_event, config.error_handler, on_database_error
        )
        self.settler = Settler(
            db, config.client_id, cache, publish, tx_slots, self.reporter, config.logger
        )
        self.inline = InlineSink(db, config.client_id, self.settler)
        self.batch = completer
        # the handler's logs and prints per attempt (started and stopped by the worker)
        self.step_logs = StepLogs(
            db,
            config.step_log_bytes,
            config.logger,
            self.reporter,
            flush_interval=config.step_log_flush_interval,
        )
        # runs the coroutines of async def handlers (started by the first; stopped by the
        # worker at shutdown)
        self.event_loop = EventLoop(log=self.log)
        # the calls this worker could not import lately: the claim skips them
        self.backoff = CallBackoff()
        self.give_back = give_back

    def start(self) -> None:
        """Start the batch sink's completer thread (when there is one)."""
        if self.batch is not None:
            self.batch.start(self.settler)

    # -- one step ------------------------------------------------------------------------

    def execute(
        self,
        step: ClaimedStep,
        cancel_event: threading.Event,
        on_settled: Callable[[], None] | None = None,
        lease_lost: threading.Event | None = None,
    ) -> bool:
        """Run ``step`` to a committed completion or failed attempt (or a stale no-op).
        ``lease_lost``: the handler's ``ctx.lease_lost`` (set by the heartbeat).

        Returns True when the completion was handed to the batch sink (group commit: the
        handler did not open ``ctx.completion_tx()``, and ``on_settled`` is given): the
        step's lease stays held until ``on_settled()`` is called on the completer thread,
        after the commit and the step's events. Else False: everything is done.

        Database trouble on the engine's own connections leaves the step to its lease
        (the recovery sweep reclaims it; no attempt is charged): trouble with the
        connection itself (``OperationalError``) while reading the step's input (tried
        on a fresh connection first) or recording its result, and a lost database under
        the handler (the BEGIN of ``ctx.completion_tx()`` or an engine read such as
        ``ctx.upstream()`` lost its connection, or the completion transaction's
        connection broke), whatever the handler did then (raised or returned), and a
        prepared statement of the engine's that the server does not have (a pooler in
        transaction mode: :func:`~cyclone_flow.db.errors.prepared_statement_lost`). Every
        other error, including one the handler raises from its own connections, becomes
        a failed attempt, so a step can never loop on an error that repeats.

        A step with a ``timeout`` has its handler told (``cancel_event``) when that many
        seconds have passed since the claim returned, which is never before the database's
        ``started_at + timeout``; a result that arrives after that deadline is stale, and
        this worker then records the attempt as failed with kind ``timeout`` itself instead
        of leaving it to the next sweep (Engine Design: Leases and Heartbeats). An ``async
        def`` handler's coroutine runs on :attr:`event_loop` while this thread waits for it;
        ``cancel_event`` cancels its task, and a task that ends cancelled is a stale result
        (nothing of it is written; a passed deadline is recorded as a ``timeout``).

        Traced (:func:`cyclone_flow.tracing.attempt`): the attempt's span, its handler's
        and its commit's, ended when the step is settled.
        """
        trace = tracing.attempt(step)
        handed = False
        tx = CompletionTx(self.db, self.tx_slots)
        extra = Wakeups()  # of runs the handler submits in its completion transaction
        duration_s: float | None = None  # handler time, for StepEvent and metrics
        attempt_log: AttemptLog | None = None  # what the handler logged and printed
        timer = None
        if step.timeout_s is not None:
            timer = threading.Timer(step.timeout_s, cancel_event.set)
            timer.daemon = True
            timer.start()
        try:
            try:
                handler, handler_input = self._prepare_retrying(step)
                submit_in_tx, enqueue_in_tx = self._completion_inserts(tx, extra)

                def upstream(name: str) -> JSON:
                    try:
                        return self.inputs.upstream_output(step.run_id, name)
                    except BaseException as exc:
                        tx.note(exc)
                        raise

                ctx = Context(
                    run_id=step.run_id,
                    node=step.node,
                    attempt=step.attempt,
                    step_id=step.id,
                    open_tx=tx.for_handler,
                    upstream=upstream,
                    cancel_event=cancel_event,
                    submit_in_tx=submit_in_tx,
                    enqueue_in_tx=enqueue_in_tx,
                    item_index=step.item_index,
                    lease_lost=lease_lost,
                )
                started = time.monotonic()
                try:
                    with trace.handler(), self.step_logs.capture(step) as attempt_log:
                        output = self._call(handler, ctx, handler_input, tx)
                finally:
                    duration_s = time.monotonic() - started
                    tx.check_not_ended()
                output_json = self._encode_output(output)
                batch = self.batch
                trace.commit()
                if (
                    tx.conn is None
                    and not extra
                    and batch is not None
                    and on_settled is not None
                    and batch.complete(
                        Completion(step, output_json, duration_s, done=on_settled, trace=trace)
                    )
                ):
                    handed = True
                    return True  # nothing to commit with the step: the group commit
                self.inline.complete(
                    Completion(
                        step, output_json, duration_s, tx, extra if extra else None, trace=trace
                    )
                )
            except HandlerCancelled:  # an async handler cancelled: its lease is lost
                tx.rollback()
                trace.commit()
                trace.finish("stale")
                self.settler.stale(step)
            except GiveBack as back:
                tx.rollback()
                self._give_back(step, back, trace)
            except StepFailure as failure:
                tx.rollback()
                trace.commit()
                failed = self.settler.fail(step, self.config.client_id, failure, duration_s)
                trace.finish(
                    outcome_name(failed),
                    error=failure.__cause__ or str(failure),
                    error_kind=str(failure.kind),
                )
        except BaseException as exc:
            self.reporter.trouble(
                "completion",
                exc.lost if isinstance(exc, _DatabaseLost) else exc,
                "step %s of run %s: could not record the result; the lease will lapse and "
                "the recovery sweep reclaims it",
                step.node,
                step.run_id,
                extra=step_extra(step.run_id, step.node, step.attempt),
            )
            tx.rollback()
            trace.finish("lost", error=exc)
        finally:
            if not handed:
                trace.finish("lost")  # a no-op when settled: ended there
            if timer is not None:
                timer.cancel()
            # after the completion or failure is recorded: no connection is held here
            self.step_logs.write(step, attempt_log)
        return False

    def _completion_inserts(
        self, tx: CompletionTx, extra: Wakeups
    ) -> tuple[Callable[..., str], Callable[..., str]]:
        """``ctx.submit_completion`` / ``ctx.enqueue_completion``: insert in the completion
        transaction and keep the wakeups for after its commit (seeds: Transactional
        Enqueueing)."""
        inserter = self.inserter

        def submit_in_tx(flow: Any, run_input: JSON = None, **options: Any) -> str:
            opts = run_options(**options)
            flow, input_json = inserter.prepare(flow, run_input)
            try:
                run_id, wakeups = inserter.insert(tx.open(), flow, input_json, opts)
            except BaseException as exc:
                tx.note(exc)
                raise
            extra.merge(wakeups)
            return run_id

        def enqueue_in_tx(call: str, args: JSON = None, **options: Any) -> str:
            retry = options.pop("retry", None)
            timeout = options.pop("timeout", None)
            opts = run_options(**options)
            flow, input_json = inserter.prepare(inserter.job_flow(call, retry, timeout), args)
            try:
                run_id, wakeups = inserter.insert(tx.open(), flow, input_json, opts)
            except BaseException as exc:
                tx.note(exc)
                raise
            extra.merge(wakeups)
            return run_id

        return submit_in_tx, enqueue_in_tx

    def _prepare_retrying(self, step: ClaimedStep) -> tuple[Callable[..., Any], JSON]:
        """:meth:`_prepare`, tried again (up to ``PREPARE_TRIES`` times) when reading the
        input lost the database: before the handler runs, a fresh connection is safe."""
        for left in range(PREPARE_TRIES - 1, -1, -1):
            try:
                return self._prepare(step)
            except Exception as exc:
                if not left or not database_lost(exc):
                    raise
                self.db.pool.check()  # the other idle connections died with this one
        raise AssertionError("unreachable")  # PREPARE_TRIES < 1

    def _prepare(self, step: ClaimedStep) -> tuple[Callable[..., Any], JSON]:
        if step.type not in ("action", "fan_out_item") or not step.call:  # never claimable
            raise StepFailure(
                ErrorKind.IMPORT_ERROR,
                f"node type {step.type!r} cannot run in this version",
                permanent=True,
                tb=None,
            )
        skipped = self.backoff.skipped(step.call)
        if skipped is not None:  # failed here lately (a limited claim cannot skip it)
            raise GiveBack(skipped)
        if self.backoff.failed_before(step.call):
            importlib.invalidate_caches()  # a module installed since is found
        try:
            handler = self.resolver.resolve(step.call)
        except HandlerImportError as exc:
            if self.give_back and gives_back(exc):  # this worker's fault: another may run it
                reason = reason_text(self.config.client_id, step.call, exc)
                self.backoff.note(step.call, reason)
                raise GiveBack(reason) from exc
            raise StepFailure(ErrorKind.IMPORT_ERROR, str(exc), permanent=True, tb=None) from exc
        self.backoff.imported(step.call)
        try:
            handler_input = self.inputs.resolve_input(step)
        except TemplateError as exc:
            raise StepFailure(ErrorKind.INPUT_ERROR, str(exc), permanent=True, tb=None) from exc
        return handler, handler_input

    def _give_back(self, step: ClaimedStep, back: GiveBack, trace: tracing.Attempt) -> None:
        """Give ``step`` back (no attempt charged, docs/failures.md), or, once its node's
        ``import_wait`` has passed since the first give-back, discard it with kind
        ``import_error``."""
        with self.tx_slots:
            queue = retry_conflicts(
                lambda: give_back_step_alone(
                    self.db,
                    step_id=step.id,
                    generation=step.lease_generation,
                    owner=self.config.client_id,
                    reason=back.reason,
                    delay_s=GIVE_BACK_DELAY_S,
                )
            )
        if queue is not None:
            self.log.warning(
                "step %s of run %s given back (no attempt charged): %s",
                step.node,
                step.run_id,
                back.reason,
                extra=step_extra(step.run_id, step.node, step.attempt),
            )
            trace.finish("given_back", error=back.reason)
            return
        failure = StepFailure(
            ErrorKind.IMPORT_ERROR,
            f"{back.reason} (given back until its import_wait passed)",
            permanent=True,
            tb=None,
        )
        trace.commit()
        failed = self.settler.fail(step, self.config.client_id, failure, None)
        trace.finish(outcome_name(failed), error=str(failure), error_kind=str(failure.kind))

    def _call(
        self, handler: Callable[..., Any], ctx: Context, handler_input: JSON, tx: CompletionTx
    ) -> JSON:
        try:
            output = handler(ctx, handler_input)
            if inspect.iscoroutine(output):  # async def (or a def that returns a coroutine)
                output = self._await(output, ctx)
        except HandlerCancelled:
            raise
        except BaseException as exc:
            if tx.broken():  # the engine's side lost the database: not the handler's fault
                raise _DatabaseLost(tx.lost or exc) from exc
            self._failed(exc)
        lost = tx.lost
        if lost is not None:  # the handler swallowed it: what it meant to write is not there
            raise _DatabaseLost(lost)
        return output

    def _await(self, coro: Any, ctx: Context) -> JSON:
        """Run an async handler's coroutine on the event loop and wait for it on this
        thread (the step keeps its worker slot). Its task runs in a copy of this thread's
        context (the trace span) with the attempt's step-log buffer set. Raises what the
        coroutine raises, or HandlerCancelled when the step's cancel event cancelled it."""
        context = contextvars.copy_context()
        context.run(step_logs.attempt_log_var.set, step_logs.current())
        label = f"step {ctx.node} of run {ctx.run_id}"
        return self.event_loop.run(coro, ctx._cancel_event, context, label)

    def _failed(self, exc: BaseException) -> NoReturn:
        """Raise the StepFailure of the handler's own exception ``exc`` (SystemExit & co.
        included): permanent for a PermanentError."""
        permanent = isinstance(exc, PermanentError)
        raise StepFailure(
            ErrorKind.HANDLER_ERROR, _describe(exc), permanent=permanent, tb=_tb(exc)
        ) from exc

    def _encode_output(self, output: JSON) -> str:
        try:
            return encode_payload("output", output, self.config.payload_limits.output_bytes)
        except Unencodable as exc:
            # the cause is the encoder's own error (not JSON), none for an unstorable string
            raise StepFailure(
                ErrorKind.HANDLER_ERROR, str(exc), permanent=True, tb=None
            ) from exc.__cause__
        except PayloadTooLargeError as too_large:
            raise StepFailure(
                ErrorKind.PAYLOAD_TOO_LARGE, str(too_large), permanent=True, tb=None
            ) from too_large


class _DatabaseLost(Exception):
    """Internal: the database was lost under the handler (``lost``: the engine's error);
    the step is left to its lease."""

    def __init__(self, lost: BaseException) -> None:
        super().__init__(str(lost))
        self.lost = lost


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if len(text) > _ERROR_LIMIT:
        text = f"{text[:_ERROR_LIMIT]}... ({len(text) - _ERROR_LIMIT} more characters cut)"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _tb(exc: BaseException) -> str:
    """The traceback of ``exc``: every line cut at 500 characters (a long message must not
    push the frames out), then its last ``_TRACEBACK_LIMIT`` characters (the innermost
    frames and the exception)."""
    lines = []
    for chunk in traceback.format_exception(exc):
        for line in chunk.splitlines(keepends=True):
            lines.append(line if len(line) <= 500 else f"{line[:500]}...\n")
    return "".join(lines)[-_TRACEBACK_LIMIT:]

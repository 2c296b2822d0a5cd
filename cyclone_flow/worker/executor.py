"""Execute one claimed step: resolve the handler and its input, call it, then commit the
completion (with the handler's business writes) or the failed attempt.

A worker can die at any line here: nothing is final until the completion transaction
commits, and a lost lease turns every late write into a stale, rolled-back transaction
(Engine Design: CAS State Transitions, ctx.CompletionTx()).
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from cyclone_flow._json import JSON, Unencodable, encode_payload
from cyclone_flow.config import ClientConfig
from cyclone_flow.db import runs, steps
from cyclone_flow.db.conn import Conn, Database
from cyclone_flow.db.rows import ClaimedStep
from cyclone_flow.engine import complete, fail
from cyclone_flow.engine.tx import Outcome, Tx
from cyclone_flow.errors import (
    CycloneError,
    HandlerImportError,
    PayloadTooLargeError,
    PermanentError,
    RunNotFoundError,
    StepTimeoutError,
    TemplateError,
)
from cyclone_flow.flowfile.template import references, render
from cyclone_flow.logs import step_extra
from cyclone_flow.notify import Publish, Wakeups
from cyclone_flow.options import job_flow, run_options
from cyclone_flow.producer import Producer
from cyclone_flow.states import ErrorKind, RunState, StepState
from cyclone_flow.worker.cache import OutputCache
from cyclone_flow.worker.completer import Completer
from cyclone_flow.worker.context import Context
from cyclone_flow.worker.events import StepEvent, call_hook, emit_cancelled, emit_engine_events
from cyclone_flow.worker.imports import HandlerResolver

_TRACEBACK_LIMIT = 8_000  # characters of traceback kept per attempt (the last ones)
_ERROR_LIMIT = 4_000  # characters of error message kept per attempt (the first ones)


class StepFailure(Exception):
    """Internal: an attempt failed with ``kind``; ``permanent`` skips remaining attempts."""

    def __init__(self, kind: ErrorKind, message: str, *, permanent: bool, tb: str | None) -> None:
        super().__init__(message)
        self.kind = kind
        self.permanent = permanent
        self.tb = tb


class Executor:
    """Runs claimed steps on the caller's thread; shared by all worker threads."""

    def __init__(
        self,
        db: Database,
        config: ClientConfig,
        resolver: HandlerResolver,
        cache: OutputCache,
        tx_slots: threading.BoundedSemaphore,
        publish: Publish,
        producer: Producer,
        completer: Completer | None = None,
    ) -> None:
        self.db = db
        self.config = config
        self.resolver = resolver
        self.cache = cache
        self.tx_slots = tx_slots
        self.publish = publish
        self.producer = producer
        self.completer = completer
        self.log = config.logger

    # -- output resolution ---------------------------------------------------------------

    def _cached_text(
        self, key: tuple[str, str | None], fetch: Callable[[], str | None]
    ) -> str | None:
        hit, text = self.cache.get(key)
        if hit:
            return str(text)
        text = fetch()
        if text is not None:
            self.cache.put(key, text, len(text.encode("utf-8")))
        return text

    def upstream_output(self, run_id: str, node: str) -> JSON:
        """Output of ``(run_id, node)`` through the LRU cache, decoded afresh for each
        caller (handlers may mutate what they get); ``KeyError`` if not completed."""
        text = self._cached_text((run_id, node), lambda: self._output_text(run_id, node))
        if text is None:
            raise KeyError(f"node {node!r} of run {run_id} has not completed")
        return json.loads(text)

    def run_input(self, run_id: str, prefetched: str | None = None) -> JSON:
        """The run's input through the same cache (key ``(run_id, None)``), decoded afresh;
        ``prefetched``: its JSON text as the claim returned it (no read, no cache entry)."""
        if prefetched is not None:
            return json.loads(prefetched)
        text = self._cached_text((run_id, None), lambda: self._run_input_text(run_id))
        return json.loads(text or "null")

    def _output_text(self, run_id: str, node: str) -> str | None:
        """The output of ``(run_id, node)`` as JSON text when that node completed, else
        None (one statement in autocommit)."""
        with self.db.autocommit_session() as s:
            row = steps.step_get_output(s, run_id=run_id, node=node)
        if row is None or row.state != StepState.COMPLETED:
            return None
        return row.output

    def _run_input_text(self, run_id: str) -> str:
        """The input of a run as JSON text (one statement in autocommit); raises
        RunNotFoundError."""
        with self.db.autocommit_session() as s:
            text = runs.run_get_input(s, run_id=run_id)
        if text is None:
            raise RunNotFoundError(run_id)
        return text

    def resolve_input(self, step: ClaimedStep) -> JSON:
        """Render the node's input template; no template means the run input (for a
        fan-out item: its list element, which ``${{ item }}`` names in a template)."""
        if step.input is None:
            if step.parent_node is not None:
                return step.item
            return self.run_input(step.run_id, step.run_input_text)
        needs_run = any(ref.kind == "run" for ref in references(step.input))
        run_input = self.run_input(step.run_id, step.run_input_text) if needs_run else None

        def upstream(node: str) -> JSON:
            try:
                return self.upstream_output(step.run_id, node)
            except KeyError as exc:
                raise TemplateError(str(exc.args[0])) from None

        return render(step.input, run_input, upstream, step.item)

    # -- one step ------------------------------------------------------------------------

    def execute(
        self,
        step: ClaimedStep,
        cancel_event: threading.Event,
        on_settled: Callable[[], None] | None = None,
    ) -> bool:
        """Run ``step`` to a committed completion or failed attempt (or a stale no-op).

        Returns True when the completion was handed to the completer (group commit: the
        handler did not open ``ctx.completion_tx()``, and ``on_settled`` is given): the
        step's lease stays held until ``on_settled()`` is called on the completer thread,
        after the commit and the step's events. Else False: everything is done.

        Database trouble on the connection itself (``OperationalError``) leaves the step
        to its lease: the recovery sweep reclaims it. Every other error becomes a failed
        attempt, so a step can never loop on an error that repeats.

        A step with a ``timeout`` has its handler told (``cancel_event``) when that many
        seconds have passed since the claim returned, which is never before the database's
        ``started_at + timeout``; a result that arrives after that deadline is stale, and
        this worker then records the attempt as failed with kind ``timeout`` itself instead
        of leaving it to the next sweep (Engine Design: Leases and Heartbeats).
        """
        owner = self.config.client_id
        tx = _CompletionTx(self.db.pool, self.tx_slots)
        extra = Wakeups()  # of runs the handler submits in its completion transaction
        duration_s: float | None = None  # handler time, for StepEvent and metrics
        timer = None
        if step.timeout_s is not None:
            timer = threading.Timer(step.timeout_s, cancel_event.set)
            timer.daemon = True
            timer.start()
        try:
            try:
                handler, handler_input = self._prepare(step)
                submit_in_tx, enqueue_in_tx = self._completion_producers(tx, extra)
                ctx = Context(
                    run_id=step.run_id,
                    node=step.node,
                    attempt=step.attempt,
                    step_id=step.id,
                    open_tx=tx.open,
                    upstream=lambda name: self.upstream_output(step.run_id, name),
                    cancel_event=cancel_event,
                    submit_in_tx=submit_in_tx,
                    enqueue_in_tx=enqueue_in_tx,
                    item_index=step.item_index,
                )
                started = time.monotonic()
                try:
                    output = self._call(handler, ctx, handler_input)
                finally:
                    duration_s = time.monotonic() - started
                    tx.check_not_ended()
                output_json = self._encode_output(output)
                if (
                    tx.conn is None
                    and not extra
                    and self.completer is not None
                    and on_settled is not None
                    and self.completer.submit(
                        step, output_json, self._settler(step, duration_s, on_settled)
                    )
                ):
                    return True  # nothing to commit with the step: the group commit
                self._complete(step, owner, tx, output_json, extra, duration_s)
            except StepFailure as failure:
                tx.rollback()
                self._fail(step, owner, failure, duration_s)
        except BaseException:
            self.log.exception(
                "step %s of run %s: could not record the result; the lease will lapse and "
                "the recovery sweep reclaims it",
                step.node,
                step.run_id,
                extra=_extra(step),
            )
            tx.rollback()
        finally:
            if timer is not None:
                timer.cancel()
        return False

    def _completion_producers(
        self, tx: _CompletionTx, extra: Wakeups
    ) -> tuple[Callable[..., str], Callable[..., str]]:
        """``ctx.submit_completion`` / ``ctx.enqueue_completion``: insert in the completion
        transaction and keep the wakeups for after its commit (seeds: Transactional
        Enqueueing)."""
        producer = self.producer

        def submit_in_tx(flow: Any, run_input: JSON = None, **options: Any) -> str:
            opts = run_options(**options)
            spec, input_json = producer.prepare(flow, run_input)
            run_id, wakeups = producer.insert(tx.open(), spec, input_json, opts)
            extra.merge(wakeups)
            return run_id

        def enqueue_in_tx(call: str, args: JSON = None, **options: Any) -> str:
            retry = options.pop("retry", None)
            timeout = options.pop("timeout", None)
            opts = run_options(**options)
            spec, input_json = producer.prepare(job_flow(call, retry=retry, timeout=timeout), args)
            run_id, wakeups = producer.insert(tx.open(), spec, input_json, opts)
            extra.merge(wakeups)
            return run_id

        return submit_in_tx, enqueue_in_tx

    def _prepare(self, step: ClaimedStep) -> tuple[Callable[..., Any], JSON]:
        if step.type not in ("action", "fan_out_item") or not step.call:  # never claimable
            raise StepFailure(
                ErrorKind.IMPORT_ERROR,
                f"node type {step.type!r} cannot run in this version",
                permanent=True,
                tb=None,
            )
        try:
            handler = self.resolver.resolve(step.call)
        except HandlerImportError as exc:
            raise StepFailure(ErrorKind.IMPORT_ERROR, str(exc), permanent=True, tb=None) from exc
        try:
            handler_input = self.resolve_input(step)
        except TemplateError as exc:
            raise StepFailure(ErrorKind.INPUT_ERROR, str(exc), permanent=True, tb=None) from exc
        return handler, handler_input

    def _call(self, handler: Callable[..., Any], ctx: Context, handler_input: JSON) -> JSON:
        try:
            return handler(ctx, handler_input)
        except PermanentError as exc:
            raise StepFailure(
                ErrorKind.HANDLER_ERROR, _describe(exc), permanent=True, tb=_tb(exc)
            ) from exc
        except BaseException as exc:  # SystemExit & co. from a handler fail its attempt
            raise StepFailure(
                ErrorKind.HANDLER_ERROR, _describe(exc), permanent=False, tb=_tb(exc)
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

    def _complete(
        self,
        step: ClaimedStep,
        owner: str,
        tx: _CompletionTx,
        output_json: str,
        extra: Wakeups | None = None,
        duration_s: float | None = None,
    ) -> None:
        conn = tx.open()
        with _failed_attempt_on_error("the completion transaction failed"):
            outcome = complete.complete_step(Tx(conn, self.db.q), step, owner, output_json)
        if outcome is None:
            tx.rollback()
            self._stale(step)
            return
        if extra:
            outcome.wakeups.merge(extra)  # published with the completion's own wakeups

        def committed(conn: Conn) -> None:
            # a downstream step this client claims reads the output from the cache, as
            # the database stores it (jsonb text: the same key order as a read would give)
            text = outcome.output_text
            if step.parent_node is None and text is not None:
                self.cache.put((step.run_id, step.node), text, len(text.encode("utf-8")))
            # the wakeups go out on the completion's own connection, right after its commit
            self.publish(outcome.wakeups, conn)

        with _failed_attempt_on_error("the completion transaction failed at commit"):
            tx.commit(committed)
        self._after_commit(step, outcome, None, duration_s)

    def _settler(
        self, step: ClaimedStep, duration_s: float | None, on_settled: Callable[[], None]
    ) -> Callable[[Outcome | Exception | None], None]:
        def settle(result: Outcome | Exception | None) -> None:
            try:
                if isinstance(result, Exception):
                    self._completion_failed(step, result, duration_s)
                else:
                    self._completed_in_batch(step, result, duration_s)
            except BaseException:
                self.log.exception(
                    "step %s of run %s: could not record the result; the lease will lapse "
                    "and the recovery sweep reclaims it",
                    step.node,
                    step.run_id,
                    extra=_extra(step),
                )
            finally:
                on_settled()

        return settle

    def _completion_failed(
        self, step: ClaimedStep, exc: Exception, duration_s: float | None
    ) -> None:
        """The completer could not commit the step even alone: as :meth:`_complete` does,
        a database error of the transaction itself fails the attempt; trouble with the
        connection or server leaves the step to its lease."""
        try:
            with _failed_attempt_on_error("the completion transaction failed"):
                raise exc
        except StepFailure as failure:
            self._fail(step, self.config.client_id, failure, duration_s)

    def _completed_in_batch(
        self, step: ClaimedStep, outcome: Outcome | None, duration_s: float | None
    ) -> None:
        """After the completer's batch committed: the step's events, or the stale case
        exactly as :meth:`_complete` handles it."""
        if outcome is None:
            self._stale(step)
            return
        self._after_commit(step, outcome, None, duration_s)

    def _stale(self, step: ClaimedStep) -> None:
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
        self._fail(step, None, failure)

    def _fail(
        self,
        step: ClaimedStep,
        owner: str | None,
        failure: StepFailure,
        duration_s: float | None = None,
    ) -> None:
        timed_out = failure.kind is ErrorKind.TIMEOUT
        with self.tx_slots:
            outcome, backoff_error = fail.fail_step_alone(
                self.db,
                self.publish,
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
            self.log.info(
                "step %s of run %s: stale failure ignored",
                step.node,
                step.run_id,
                extra=_extra(step),
            )
            if not timed_out:
                self._fail_timed_out(step)
            return
        self.log.warning(
            "step %s of run %s attempt %d failed (%s): %s",
            step.node,
            step.run_id,
            step.attempt,
            failure.kind,
            failure,
            extra=_extra(step),
        )
        event = self._after_commit(step, outcome, failure, duration_s)
        # the handler's own exception (or the engine's typed error), never the internal
        # StepFailure wrapper
        cause = failure.__cause__
        error = cause if cause is not None else CycloneError(str(failure))
        call_hook(self.log, self.config.error_handler, event, error)

    def _after_commit(
        self,
        step: ClaimedStep,
        outcome: Outcome,
        failure: StepFailure | None = None,
        duration_s: float | None = None,
    ) -> StepEvent:
        """Report a committed (and published) transition of ``step``: its step event, the
        steps it cancelled, the nodes the engine decided, the run's end."""
        kind = {
            StepState.COMPLETED: "completed",
            StepState.AVAILABLE: "retry_scheduled",
            StepState.DISCARDED: "discarded",
        }.get(outcome.step_state, str(outcome.step_state))
        event = StepEvent(
            kind=kind,
            run_id=step.run_id,
            node=step.node,
            step_id=step.id,
            attempt=step.attempt,
            error=str(failure) if failure else None,
            error_kind=str(failure.kind) if failure else None,
            queue=step.queue,
            duration_s=duration_s,
        )
        call_hook(self.log, self.config.on_step_event, event)
        emit_cancelled(self.log, self.config.on_step_event, step.run_id, outcome.cancelled)
        emit_engine_events(self.log, self.config.on_step_event, outcome.engine_events)
        if outcome.run_state is not None:
            level = self.log.info if outcome.run_state is RunState.COMPLETED else self.log.warning
            level("run %s %s", step.run_id, outcome.run_state, extra=_extra(step))
        return event


class _CompletionTx:
    """The step's completion transaction, opened lazily (by ``ctx.completion_tx()`` or at
    completion) on a pool connection inside a transaction block, within a tx slot."""

    def __init__(self, pool: ConnectionPool[Any], slots: threading.BoundedSemaphore) -> None:
        self.pool = pool
        self.slots = slots
        self.conn: Conn | None = None
        self._tx: psycopg.Transaction | None = None

    def open(self) -> Conn:
        if self.conn is None:
            self.slots.acquire()
            try:
                conn = self.pool.getconn()
            except BaseException:
                self.slots.release()
                raise
            self.conn = conn
            self._tx = conn.transaction()
            self._tx.__enter__()
        return self.conn

    def check_not_ended(self) -> None:
        """Raise a permanent StepFailure when the handler ended the transaction itself
        (``COMMIT``/``ROLLBACK`` through ``execute``): exactly-once is then lost, and the
        step must not be retried on top of writes that already committed."""
        if self.conn is None:
            return
        if self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            raise StepFailure(
                ErrorKind.HANDLER_ERROR,
                "the handler ended its completion transaction itself (COMMIT or ROLLBACK): "
                "its writes are no longer tied to the step; never end ctx.completion_tx()",
                permanent=True,
                tb=None,
            )

    def commit(self, committed: Callable[[Conn], None] | None = None) -> None:
        """Commit; then ``committed(conn)`` on the idle connection before it goes back to
        the pool (after-commit work such as publishing the wakeups on it)."""
        self._close(None, committed)

    def rollback(self) -> None:
        self._close(psycopg.Rollback())

    def _close(
        self, exc: psycopg.Rollback | None, committed: Callable[[Conn], None] | None = None
    ) -> None:
        conn, tx = self.conn, self._tx
        if conn is None or tx is None:
            return
        self.conn = self._tx = None
        try:
            if exc is None:
                tx.__exit__(None, None, None)
                if committed is not None:
                    committed(conn)
            else:
                tx.__exit__(type(exc), exc, None)
        finally:
            self.pool.putconn(conn)
            self.slots.release()


@contextmanager
def _failed_attempt_on_error(what: str) -> Iterator[None]:
    """Turn a database error of the step's own transaction into a failed attempt (e.g. the
    handler left its transaction failed, or a deferred constraint broke), so it can never
    loop. Trouble with the connection or server itself (OperationalError, but not a
    deadlock or serialization failure) propagates: the step is left to its lease."""
    try:
        yield
    except psycopg.Error as exc:
        if isinstance(exc, psycopg.OperationalError) and not isinstance(
            exc, psycopg.errors.TransactionRollback
        ):
            raise
        raise StepFailure(
            ErrorKind.HANDLER_ERROR,
            f"{what}: {type(exc).__name__}: {exc}",
            permanent=isinstance(exc, psycopg.DataError),
            tb=None,
        ) from exc


def _extra(step: ClaimedStep) -> dict[str, Any]:
    return step_extra(step.run_id, step.node, step.attempt)


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

"""The handler's view of its step: ids, upstream outputs, cancellation, and the completion
transaction (Engine Design: ctx.CompletionTx(): The Exactly-Once-Effects Wedge)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from cyclone_flow.db.conn import Database
from cyclone_flow.db.errors import database_lost, prepared_statement_lost
from cyclone_flow.flowfile.model import JSON
from cyclone_flow.logs import LOGGER_NAME, step_extra
from cyclone_flow.states import ErrorKind
from cyclone_flow.worker.step_failure import StepFailure
from cyclone_flow.worker.step_logs import StepLogger

STEP_LOGGER_NAME = f"{LOGGER_NAME}.step"
"""The logger behind ``ctx.log`` (its records carry ``run_id``, ``node``, ``attempt``)."""

Conn = psycopg.Connection[Any]


class Context:
    """Passed to every handler as ``handler(ctx, input)``.

    Attributes: ``run_id`` (str UUID), ``node`` (str; ``NODE[i]`` for item ``i`` of a
    fan-out node), ``attempt`` (1-based; a reclaim after a crash keeps the number),
    ``step_id`` (int), ``item_index`` (0-based index of a fan-out item in its list, else
    None), ``log`` (a ``logging.LoggerAdapter`` of the ``cyclone_flow.step`` logger whose
    records carry the step's fields: from INFO up they are kept in the step's logs
    whatever the logger's level, as are the handler thread's other ``logging`` records
    and its ``print`` output; ``cyclone-flow logs RUN``).

    An ``async def`` handler gets the same object, on the worker's event loop thread: its
    methods are synchronous. ``completion_tx()``, ``upstream()`` and the ``*_completion``
    methods block the loop for their round trip (``completion_tx()``'s first call also
    while it waits for a tx slot: ``await asyncio.to_thread(ctx.completion_tx)`` waits off
    the loop); use ``cancelled()``, never ``wait_cancelled()``, in a coroutine (a lost
    lease or a timeout cancels the handler's task anyway).
    """

    def __init__(
        self,
        *,
        run_id: str,
        node: str,
        attempt: int,
        step_id: int,
        open_tx: Callable[[], Conn],
        upstream: Callable[[str], JSON],
        cancel_event: threading.Event,
        submit_in_tx: Callable[..., str],
        enqueue_in_tx: Callable[..., str],
        item_index: int | None = None,
        lease_lost: threading.Event | None = None,
    ) -> None:
        self.run_id = run_id
        self.node = node
        self.attempt = attempt
        self.step_id = step_id
        self._open_tx = open_tx
        self._upstream = upstream
        self._cancel_event = cancel_event
        self._submit_in_tx = submit_in_tx
        self._enqueue_in_tx = enqueue_in_tx
        self.item_index = item_index
        self._log: StepLogger | None = None
        self._lease_lost = lease_lost if lease_lost is not None else threading.Event()

    @property
    def log(self) -> StepLogger:
        """A ``logging.LoggerAdapter`` of the ``cyclone_flow.step`` logger whose records
        carry this step's fields (built on first use: most handlers never log)."""
        log = self._log
        if log is None:
            log = self._log = StepLogger(
                logging.getLogger(STEP_LOGGER_NAME),
                step_extra(self.run_id, self.node, self.attempt),
            )
        return log

    def completion_tx(self) -> Conn:
        """The psycopg connection of this step's completion transaction, already inside it.

        Execute business writes on it; never commit or roll back yourself (the connection
        is inside a transaction block, so ``commit()`` raises). When the handler returns,
        the writes commit together with the step's completion, or not at all: a crash, an
        exception, or a stale completion (the lease was lost) rolls them back. The first
        call waits for a free ``tx_slots`` slot; later calls return the same connection.
        The connection is psycopg's synchronous one, for ``async def`` handlers too (it is
        thread-safe: ``asyncio.to_thread(conn.execute, ...)`` keeps the loop free).
        """
        return self._open_tx()

    def upstream(self, name: str) -> JSON:
        """The output of node ``name`` of this run; raises ``KeyError`` when that node has
        not completed (Engine Design: Output Resolution; cached per client)."""
        return self._upstream(name)

    def cancelled(self) -> bool:
        """True once this attempt's lease is lost (run cancelled or failed, step timed out
        or reclaimed): cooperative code should stop; its completion will be ignored."""
        return self._cancel_event.is_set()

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds (None: forever) until :meth:`cancelled`; return
        whether it is."""
        return self._cancel_event.wait(timeout)

    @property
    def lease_lost(self) -> threading.Event:
        """A ``threading.Event`` the heartbeat sets when it finds this attempt's lease gone
        (not renewed: the step was reclaimed because this worker stalled past its lease
        TTL, e.g. SIGSTOP or a long GC pause, or it was cancelled or timed out). Another
        worker may be running the step by then, even under ``concurrency: {limit: 1}``
        (docs/flow-control.md): a long handler should check it (``is_set()``, or
        ``wait(seconds)``) and stop; its completion will be refused anyway. When it is
        set, so is :meth:`cancelled`; not the other way round (a shutdown, or this
        process's own timer of the step's ``timeout``, sets only :meth:`cancelled`)."""
        return self._lease_lost

    def submit_completion(self, flow: Any, input: JSON = None, **options: Any) -> str:
        """Submit a run of ``flow`` (a :class:`~cyclone_flow.Flow` or a flow file path) in
        this step's completion transaction: it exists only if the step completes (a failed
        attempt, a crash or a lost lease rolls it back), and its wakeup is published with
        the completion's (seeds: Transactional Enqueueing, SubmitCompletion). Options as
        for ``Client.submit``; returns the run id. Raises what ``Client.submit`` raises.
        """
        return self._submit_in_tx(flow, input, **options)

    def enqueue_completion(self, callable: str, args: JSON = None, **options: Any) -> str:
        """Enqueue a standalone job (``"package.module:function"``) in this step's
        completion transaction, committed with the step or not at all (seeds:
        EnqueueCompletion). Options as for ``Client.enqueue``; returns the run id."""
        return self._enqueue_in_tx(callable, args, **options)


class CompletionTx:
    """The step's completion transaction, opened lazily (by ``ctx.completion_tx()`` or at
    completion) on a pool connection inside a READ COMMITTED transaction block
    (:meth:`Database.begin`: a connection found lost at BEGIN is replaced), within a tx
    slot.

    ``handed``: the handler was given the connection (``ctx.completion_tx()``; the
    completion then checks that the transaction and the session's default are still READ
    COMMITTED, as :class:`~cyclone_flow.db.conn.Database` made them). ``lost``:
    the error of the engine's own database trouble while the handler ran (the BEGIN of
    ``ctx.completion_tx()`` failed for good, or an engine read such as ``ctx.upstream()``
    lost its connection or met a prepared statement the server does not have), else
    None: the executor then leaves the step to its lease instead of failing its
    attempt."""

    def __init__(self, db: Database, slots: threading.BoundedSemaphore) -> None:
        self.db = db
        self.slots = slots
        self.conn: Conn | None = None
        self.handed = False
        self.lost: BaseException | None = None
        self._tx: psycopg.Transaction | None = None

    def open(self) -> Conn:
        """The transaction's connection (opened at the first call). Raises the psycopg
        error of its BEGIN (recorded in ``lost`` when the database is lost)."""
        if self.conn is None:
            self.slots.acquire()
            try:
                conn, tx = self.db.begin()
            except BaseException as exc:
                self.slots.release()
                self.note(exc)
                raise
            self.conn, self._tx = conn, tx
        return self.conn

    def for_handler(self) -> Conn:
        """:meth:`open` for ``ctx.completion_tx()``: the handler holds the connection."""
        conn = self.open()
        self.handed = True
        return conn

    def note(self, exc: BaseException) -> None:
        """Record ``exc`` in ``lost`` when it says the database is lost, or that a prepared
        statement of the engine's is not on the server (a misconfigured pooler): engine
        code that runs for the handler calls this with what it raises."""
        if self.lost is None and (database_lost(exc) or prepared_statement_lost(exc)):
            self.lost = exc

    def broken(self) -> bool:
        """Whether the database was lost under the handler: an engine call for it lost
        its connection (``lost``), or the transaction's own connection broke."""
        return self.lost is not None or (self.conn is not None and self.conn.broken)

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
        """Roll back (a no-op when not open)."""
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
            self.db.putconn(conn)
            self.slots.release()

"""The handler's view of its step: ids, upstream outputs, cancellation, and the completion
transaction (Engine Design: ctx.CompletionTx(): The Exactly-Once-Effects Wedge)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from cyclone_flow.flowfile.model import JSON
from cyclone_flow.logs import LOGGER_NAME, step_extra
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

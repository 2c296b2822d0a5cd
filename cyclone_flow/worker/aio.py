"""The event loop of a started client's ``async def`` handlers (issue 30.6).

One asyncio loop on one daemon thread (``cyclone-asyncio``) per started client, started by
the first coroutine a handler returns and stopped by :meth:`EventLoop.stop` at shutdown.
The worker thread that claimed the step submits the coroutine and waits for it, so the
step keeps its worker slot (``worker_queues`` still bounds how many steps run at once),
its lease is renewed by the heartbeat as for a synchronous handler, and everything after
the handler (its completion transaction, the failed attempt) runs on the worker thread
as before.

Each coroutine runs as a task in a copy of the worker thread's ``contextvars`` context
(given by the caller), so what a task logs and prints finds its attempt's step logs
(:data:`cyclone_flow.worker.step_logs.attempt_log_var`) and its trace span. When the
step's cancel event is set (timeout, lost lease, shutdown) the task is cancelled and the
caller waits until it has ended (its ``finally`` blocks ran) before it goes on. A task
that ignores its cancellation is abandoned when the loop stops: one warning names its
step, instead of asyncio's ``Task was destroyed but it is pending!``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Coroutine
from typing import Any

__all__ = ["CANCEL_POLL_S", "EventLoop", "HandlerCancelled"]

CANCEL_POLL_S = 0.05
"""How often (seconds) a worker thread waiting for its coroutine looks at the step's
cancel event: a cancellation reaches the task within this delay."""


class HandlerCancelled(Exception):
    """The handler's coroutine was cancelled because its step's cancel event was set (it
    ended with ``asyncio.CancelledError``: its ``__cause__``)."""


class _Call:
    """One coroutine on the loop: its task (set on the loop thread) and its outcome."""

    __slots__ = ("context", "coro", "done", "error", "label", "ok", "task", "value")

    def __init__(
        self, coro: Coroutine[Any, Any, Any], context: contextvars.Context, label: str
    ) -> None:
        self.coro = coro
        self.context = context
        self.label = label
        self.task: asyncio.Task[Any] | None = None
        self.done = threading.Event()
        self.ok = False
        self.value: Any = None
        self.error: BaseException | None = None

    async def guarded(self) -> None:
        """Await the coroutine; keep its result or exception (SystemExit and
        KeyboardInterrupt too: they must not stop the loop that other steps share)."""
        try:
            self.value = await self.coro
            self.ok = True
        except asyncio.CancelledError as exc:
            self.error = exc
            raise
        except BaseException as exc:
            self.error = exc

    def finished(self, task: asyncio.Task[Any]) -> None:
        """The task's done callback (the loop thread): wake the waiting worker thread."""
        if task.cancelled() and self.error is None:
            self.error = asyncio.CancelledError()
        self.done.set()


class EventLoop:
    """The lazily started loop thread of one started client; thread-safe. ``log``: where
    an abandoned task is told (default: the ``cyclone_flow`` logger)."""

    def __init__(self, name: str = "cyclone-asyncio", log: logging.Logger | None = None) -> None:
        self.name = name
        self.log = log if log is not None else logging.getLogger("cyclone_flow")
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._calls: set[_Call] = set()
        self._stopped = False

    @property
    def running(self) -> bool:
        """Whether the loop thread is started (tests and observability)."""
        return self._loop is not None

    def run(
        self,
        coro: Coroutine[Any, Any, Any],
        cancel: threading.Event,
        context: contextvars.Context | None = None,
        label: str = "a handler",
    ) -> Any:
        """Run ``coro`` on the loop (starting it first when needed) in ``context`` (default:
        a copy of the caller's) and block the calling thread until it ends; return its
        result or raise its exception. Once ``cancel`` is set the task is cancelled and,
        when it ends with ``CancelledError``, :class:`HandlerCancelled` is raised (a
        coroutine that catches the cancellation and returns or raises ends as it chose).
        ``label`` names it in the warning of :meth:`stop` (``step NODE of run ID``)."""
        context = context if context is not None else contextvars.copy_context()
        call = _Call(coro, context, label)
        try:
            with self._lock:
                loop = self._start()
                self._calls.add(call)
            loop.call_soon_threadsafe(self._begin, call)
        except RuntimeError:  # stopped (shutdown): the step's lease is being released
            with self._lock:
                self._calls.discard(call)
            coro.close()
            raise HandlerCancelled("the worker's event loop is stopped") from None
        try:
            told = False
            while not call.done.wait(CANCEL_POLL_S):
                if not told and cancel.is_set():
                    told = True
                    with contextlib.suppress(RuntimeError):  # stopped: stop() ends it
                        loop.call_soon_threadsafe(self._cancel, call)
        finally:
            with self._lock:
                self._calls.discard(call)
        if call.ok:
            return call.value
        error = call.error
        if isinstance(error, asyncio.CancelledError):
            raise HandlerCancelled("the handler's coroutine was cancelled") from error
        assert error is not None
        raise error

    def stop(self, timeout: float = 2.0) -> None:
        """Cancel the tasks still running, wait up to ``timeout`` seconds for them, stop the
        loop and join its thread. Worker threads still waiting then get
        :class:`HandlerCancelled`, as does a later :meth:`run` (a client's worker starts a
        new executor, and so a new loop, at each start)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            self._stopped = True
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._cancel_all)
        with self._lock:
            calls = list(self._calls)
        deadline = time.monotonic() + timeout
        for call in calls:
            call.done.wait(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(max(0.0, deadline - time.monotonic()))
        for call in calls:  # a task that would not end: its worker thread goes on
            if not call.done.is_set():
                call.error = asyncio.CancelledError()
                call.done.set()

    # -- the loop thread -------------------------------------------------------------

    def _start(self) -> asyncio.AbstractEventLoop:
        """The loop, started at the first call (under ``_lock``); RuntimeError once
        stopped."""
        loop = self._loop
        if loop is not None:
            return loop
        if self._stopped:
            raise RuntimeError("stopped")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=self._serve, args=(loop, self.log), name=self.name)
        thread.daemon = True
        self._loop, self._thread = loop, thread
        thread.start()
        return loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, log: logging.Logger) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            try:
                _abandon(loop, log)
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    @staticmethod
    def _begin(call: _Call) -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(call.guarded(), name=call.label, context=call.context)
        task.cyclone_handler = True  # type: ignore[attr-defined]  # _abandon tells it
        call.task = task
        task.add_done_callback(call.finished)

    @staticmethod
    def _cancel(call: _Call) -> None:
        if call.task is not None:
            call.task.cancel()

    def _cancel_all(self) -> None:
        with self._lock:
            calls = list(self._calls)
        for call in calls:
            self._cancel(call)


def _abandon(loop: asyncio.AbstractEventLoop, log: logging.Logger) -> None:
    """The loop stopped with tasks still pending (a handler that ignored its
    cancellation, and the tasks it made): one warning per handler's task, naming its step,
    and none of asyncio's ``Task was destroyed but it is pending!`` when they are
    collected (the loop thread, at ``close``)."""
    for task in asyncio.all_tasks(loop):
        if task.done():
            continue
        task._log_destroy_pending = False  # type: ignore[attr-defined]  # told here
        if getattr(task, "cyclone_handler", False):
            log.warning("abandoned an async handler that ignored cancellation: %s", task.get_name())

"""Step logs: what a handler logs and prints during one attempt, kept in
``cyclone_step_logs`` and shown by ``cyclone-flow logs`` and ``status``.

While a started client's worker runs, :class:`StepLogs` has
- a :class:`ThreadStream` proxy on ``sys.stdout`` and ``sys.stderr`` (process-global): a
  write from a thread that runs a handler goes to that attempt's buffer, any other write
  passes through to the stream the proxy replaced (restored when the last worker stops);
- a :class:`CaptureHandler` on the root logger and on the ``cyclone_flow`` logger: a
  record emitted in a thread that runs a handler (``ctx.log``, or any ``logging`` call
  that passes its logger's level) is also added to the attempt's buffer, formatted with
  its traceback; the record still reaches every other handler.

:meth:`StepLogs.capture` wraps one handler call: lines of the handler's thread only
(threads it starts itself are not captured; an ``async def`` handler's lines are those of
its task, found through :data:`attempt_log_var`), up to ``step_log_bytes`` (UTF-8) per attempt,
a line saying so where the cut began and a last one saying how much was cut; an exception
escaping the handler adds its traceback.

Lines are stored while the attempt runs (issue 30.4): the :class:`Flusher` of the started
client (one thread, started at its first line: a handler that logs nothing costs no
statement and no wakeup) writes the lines of every running attempt in one multi-row
INSERT at most ``step_log_flush_interval`` (1 s) after the first unwritten one, at once
when an attempt has :data:`FLUSH_LINES` unwritten. :meth:`StepLogs.write` stores the
rest right after the attempt's completion or failure is recorded, on the worker thread,
holding no other connection. ``seq`` numbers an attempt's lines from 0 across its
batches, and an attempt's batches are written one after the other (its ``flush_lock``),
so they are in ``id`` order too. A crash (``kill -9``) loses only the lines not yet
flushed. A failed write is logged and drops those lines, never the step.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TextIO

from cyclone_flow.db import step_logs
from cyclone_flow.db.conn import Database
from cyclone_flow.db.rows import ClaimedStep
from cyclone_flow.events import Reporter
from cyclone_flow.logs import LOGGER_NAME, has_other_handler

__all__ = [
    "FLUSH_LINES",
    "AttemptLog",
    "CaptureHandler",
    "Flusher",
    "StepLogger",
    "StepLogs",
    "ThreadStream",
    "current",
    "set_drain",
    "sole_running",
]

_local = threading.local()
attempt_log_var: contextvars.ContextVar[AttemptLog | None] = contextvars.ContextVar(
    "cyclone_attempt_log", default=None
)
"""The attempt buffer of an ``async def`` handler's task (set in the task's context by
:mod:`cyclone_flow.worker.aio`'s caller: the loop thread runs many attempts at once)."""
_install_lock = threading.Lock()
_installs = 0
_saved: tuple[Any, Any] | None = None
_handler: CaptureHandler | None = None
_TB_LIMIT = 8_000  # characters of a handler's traceback kept (the last ones)
FLUSH_LINES = 500
"""Unwritten lines of one attempt that make the flusher write at once (not waiting for
its interval)."""
_running: dict[int, AttemptLog] = {}  # the attempts being captured in this process
_running_lock = threading.Lock()
_drain: Callable[[], None] | None = None  # set by cyclone_flow.cli.output while it runs


def sole_running() -> AttemptLog | None:
    """The buffer of the one attempt this process captures now, or None (none or several
    run): where output that cannot be told apart by thread (a child process's, or one
    written to file descriptor 1 or 2) belongs."""
    with _running_lock:
        if len(_running) != 1:
            return None
        return next(iter(_running.values()))


def set_drain(drain: Callable[[], None] | None) -> None:
    """Have ``drain()`` called at the end of every captured attempt, before its buffer is
    closed (:mod:`cyclone_flow.cli.output`: the output still in its pipes goes to the
    attempt); None removes it."""
    global _drain
    _drain = drain


class AttemptLog:
    """The lines of one attempt, ``(at, stream, level, message)`` each, kept up to
    ``cap`` bytes of UTF-8 message text; ``dropped`` counts the bytes cut after that. A
    stream's partial line waits for its newline (or :meth:`close`).

    ``lines`` holds the lines not yet taken for storing (:meth:`take`), ``stored`` how
    many were taken before them (the ``seq`` of ``lines[0]``). With ``notify`` (the
    flusher's :meth:`Flusher.mark`), the first unwritten line and the
    :data:`FLUSH_LINES`-th call ``notify(self, full)``. Safe to use from several threads.
    """

    def __init__(
        self,
        cap: int,
        step: ClaimedStep | None = None,
        notify: Callable[[AttemptLog, bool], None] | None = None,
    ) -> None:
        self.cap = cap
        self.step = step
        self.lines: list[tuple[datetime, str, str | None, str]] = []
        self.stored = 0
        self.size = 0
        self.dropped = 0
        self.flush_lock = threading.Lock()  # held while a batch is taken and written
        self._lock = threading.Lock()
        self._notify = notify
        self._partial: dict[str, str] = {}
        self._last_record: logging.LogRecord | None = None

    def _append(self, line: tuple[datetime, str, str | None, str]) -> None:
        with self._lock:
            self.lines.append(line)
            n = len(self.lines)
        self._notify_at(n, n)

    def _notify_at(self, before: int, after: int) -> None:
        """Tell the flusher when the unwritten lines went from ``before - 1`` to
        ``after``: the first one, or :data:`FLUSH_LINES` reached."""
        notify = self._notify
        if notify is None or not after:
            return
        if before == 1 or before <= FLUSH_LINES <= after:
            notify(self, after >= FLUSH_LINES)

    def _keep(self, stream: str, level: str | None, message: str) -> None:
        """Keep one line or count it as cut (called with ``_lock`` held)."""
        message = message.replace("\x00", "\ufffd")
        size = len(message.encode("utf-8", "replace"))
        if not self.dropped and self.size + size <= self.cap:
            self.size += size
            self.lines.append((datetime.now(UTC), stream, level, message))
            return
        if not self.dropped:  # said at once: a reader following the run sees why lines stop
            self.lines.append(
                (
                    datetime.now(UTC),
                    "log",
                    "WARNING",
                    f"[cyclone-flow] this attempt's logs reached step_log_bytes = {self.cap}: "
                    "the lines after this one are cut",
                )
            )
        self.dropped += size

    def add(self, stream: str, level: str | None, message: str) -> None:
        """Keep one line (NUL characters replaced: Postgres text cannot hold them)."""
        with self._lock:
            before = len(self.lines) + 1
            self._keep(stream, level, message)
            after = len(self.lines)
        self._notify_at(before, after)

    def write(self, stream: str, text: str) -> None:
        """Text written to ``stream`` (``stdout``/``stderr``): one line per newline."""
        with self._lock:
            text = self._partial.pop(stream, "") + text
            *whole, rest = text.split("\n")
            if rest:
                self._partial[stream] = rest
            before = len(self.lines) + 1
            for line in whole:
                self._keep(stream, None, line)
            after = len(self.lines)
        if after >= before:
            self._notify_at(before, after)

    def record(self, record: logging.LogRecord, text: str) -> None:
        """A logging record (once, though two capture handlers see it)."""
        if record is self._last_record:
            return
        self._last_record = record
        self.add("log", record.levelname, text)

    def flush(self) -> None:
        """Keep the partial lines (written without their newline) as lines."""
        with self._lock:
            partial = sorted(self._partial.items())
            self._partial.clear()
        for stream, rest in partial:
            self.add(stream, None, rest)

    def close(self) -> None:
        """Flush the partial lines, then mark the cut (if any) with a last line."""
        self.flush()
        if self.dropped:
            self._append(
                (
                    datetime.now(UTC),
                    "log",
                    "WARNING",
                    f"[cyclone-flow] {self.dropped} more bytes of this attempt's logs were cut "
                    f"(step_log_bytes = {self.cap})",
                )
            )

    def take(self) -> tuple[int, list[tuple[datetime, str, str | None, str]]]:
        """The unwritten lines and the ``seq`` of the first; they count as stored from
        now on (call with ``flush_lock`` held, and write them before releasing it)."""
        with self._lock:
            lines, self.lines = self.lines, []
            first = self.stored
            self.stored += len(lines)
        return first, lines


def current() -> AttemptLog | None:
    """The buffer of the attempt the calling thread (or asyncio task) runs, or None."""
    log = getattr(_local, "log", None)
    return log if log is not None else attempt_log_var.get()


class ThreadStream:
    """A proxy for ``sys.stdout`` / ``sys.stderr``: writes of a thread that runs a handler
    go to its attempt's buffer, all others to ``uncaptured`` (the stream replaced)."""

    def __init__(self, name: str, uncaptured: TextIO) -> None:
        self.name = name
        self.uncaptured = uncaptured

    def write(self, text: str) -> int:
        """Write ``text`` to the calling thread's attempt buffer, or pass it through."""
        log = current()
        if log is None:
            return self.uncaptured.write(text)
        log.write(self.name, str(text))
        return len(text)

    def flush(self) -> None:
        """Flush the stream replaced (a handler's own flush is a no-op)."""
        if current() is None:
            self.uncaptured.flush()

    def isatty(self) -> bool:
        """False for a handler's thread (its output goes to a buffer)."""
        return current() is None and self.uncaptured.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.uncaptured, name)


class CaptureHandler(logging.Handler):
    """Adds every record of a thread that runs a handler to that attempt's buffer;
    prints nothing itself (``captures_only``: the default stderr handler of
    :mod:`cyclone_flow.logs` does not step aside for it)."""

    captures_only = True

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(_FORMAT)

    def emit(self, record: logging.LogRecord) -> None:
        log = current()
        try:
            if log is not None:
                log.record(record, self.format(record))
            self._last_resort(record)
        except Exception:
            self.handleError(record)

    def _last_resort(self, record: logging.LogRecord) -> None:
        """What Python does for a record no handler takes (print WARNING and above to
        stderr), which this handler on the root logger would otherwise prevent; written
        past the proxy, so a handler's record is not captured twice."""
        last = logging.lastResort
        if last is None or record.levelno < last.level:
            return
        if has_other_handler(logging.getLogger(record.name), self):
            return
        stream = getattr(sys.stderr, "uncaptured", sys.stderr)
        stream.write(last.format(record) + "\n")


_FORMAT = logging.Formatter("%(name)s: %(message)s")


class StepLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """``ctx.log``: a ``logging.LoggerAdapter`` whose records carry the step's fields and
    are kept in the attempt's step logs from INFO up whatever the logger's level (DEBUG
    when the logger is enabled for it); they reach the logging handlers as usual, at the
    levels the application configured."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        """Log ``msg % args`` at ``level`` (``exc_info``, ``stack_info``, ``extra`` as
        for ``logging``)."""
        enabled = self.isEnabledFor(level)
        attempt = current()
        if attempt is None or not (enabled or level >= logging.INFO):
            if enabled:
                super().log(level, msg, *args, **kwargs)
            return
        msg, options = self.process(msg, kwargs)
        exc_info = options.get("exc_info")
        if exc_info is True or (exc_info is not None and not isinstance(exc_info, tuple)):
            exc_info = (
                (type(exc_info), exc_info, exc_info.__traceback__)
                if isinstance(exc_info, BaseException)
                else sys.exc_info()
            )
        record = self.logger.makeRecord(
            self.logger.name,
            level,
            "(handler)",
            0,
            msg,
            args,
            exc_info or None,
            extra=options.get("extra"),
        )
        attempt.record(record, _FORMAT.format(record))
        if enabled:
            self.logger.handle(record)  # the capture handler sees it again: kept once


def install() -> None:
    """Put the stream proxies and the capture handler in place (counted: the first of
    several started clients installs, the last :func:`uninstall` restores)."""
    global _installs, _saved, _handler
    with _install_lock:
        _installs += 1
        if _installs > 1:
            return
        _saved = (sys.stdout, sys.stderr)
        sys.stdout = ThreadStream("stdout", sys.stdout)
        sys.stderr = ThreadStream("stderr", sys.stderr)
        _handler = CaptureHandler()
        logging.getLogger().addHandler(_handler)
        logging.getLogger(LOGGER_NAME).addHandler(_handler)


def uninstall() -> None:
    """Undo one :func:`install`; the last one restores ``sys.stdout`` / ``sys.stderr``
    (unless something replaced the proxies since) and removes the capture handler."""
    global _installs, _saved, _handler
    with _install_lock:
        if _installs == 0:
            return
        _installs -= 1
        if _installs:
            return
        if _saved is not None:
            if isinstance(sys.stdout, ThreadStream):
                sys.stdout = _saved[0]
            if isinstance(sys.stderr, ThreadStream):
                sys.stderr = _saved[1]
        if _handler is not None:
            logging.getLogger().removeHandler(_handler)
            logging.getLogger(LOGGER_NAME).removeHandler(_handler)
        _saved = _handler = None


class _Capture:
    """The context manager of :meth:`StepLogs.capture` (a class, not a generator: it
    wraps every handler call, so it costs two plain method calls)."""

    __slots__ = ("log",)

    def __init__(self, log: AttemptLog | None) -> None:
        self.log = log

    def __enter__(self) -> AttemptLog | None:
        log = self.log
        if log is not None:
            _local.log = log
            with _running_lock:
                _running[id(log)] = log
        return log

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        log = self.log
        if log is None:
            return
        try:
            drain = _drain
            if drain is not None:
                drain()  # what a child process wrote is this attempt's while it is the one
            if exc is not None:
                cause = exc.__cause__ or exc
                text = "".join(traceback.format_exception(cause))[-_TB_LIMIT:]
                what = "".join(traceback.format_exception_only(cause)).strip().splitlines()
                log.flush()
                log.add(
                    "log",
                    "ERROR",
                    f"the handler raised {what[-1] if what else ''}\n{text.rstrip()}",
                )
        finally:
            _local.log = None
            with _running_lock:
                _running.pop(id(log), None)
            log.close()


class Flusher:
    """Writes the unwritten lines of the running attempts of one started client, all in
    one statement per pass, on one thread started at the first line marked.

    A pass runs ``interval`` seconds after the first line marked since the last pass, or
    at once when an attempt has :data:`FLUSH_LINES` unwritten (``mark(log, full=True)``);
    between passes with nothing marked the thread waits without a timeout (no wakeups).
    ``on_error(exc, lines)`` reports a failed pass (its lines are dropped)."""

    def __init__(
        self,
        db: Database,
        interval: float,
        on_error: Callable[[BaseException, int], None],
    ) -> None:
        self.db = db
        self.interval = interval
        self.on_error = on_error
        self.passes = 0  # statements sent (tests, benchmarks)
        self._cond = threading.Condition()
        self._marked: dict[int, AttemptLog] = {}
        self._due: float | None = None
        self._full = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    def mark(self, log: AttemptLog, full: bool) -> None:
        """``log`` has unwritten lines (``full``: :data:`FLUSH_LINES` of them)."""
        with self._cond:
            if self._stopping:
                return  # the worker's own write at the attempt's end stores them
            self._marked[id(log)] = log
            first = self._due is None
            if first:
                self._due = time.monotonic() + self.interval
            if full:
                self._full = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="cyclone-step-logs", daemon=True
                )
                self._thread.start()
            elif first or full:
                self._cond.notify()

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is marked, then end the thread (waits up to ``timeout`` s)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._stopping or self._full):
                    if self._due is None:
                        self._cond.wait()
                        continue
                    left = self._due - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch = list(self._marked.values())
                self._marked.clear()
                self._due = None
                self._full = False
                stopping = self._stopping
            if batch:
                self.store(batch)
            if stopping:
                return

    def store(self, logs: list[AttemptLog]) -> None:
        """Write the unwritten lines of ``logs`` (attempts with a ``step``) in one
        statement, holding each one's ``flush_lock`` until it is written."""
        held: list[AttemptLog] = []
        rows: list[step_logs.LogRow] = []
        try:
            for log in logs:
                step = log.step
                if step is None:
                    continue
                log.flush_lock.acquire()
                held.append(log)
                first, lines = log.take()
                rows.extend(
                    (step.run_id, step.node, step.attempt, step.lease_generation, first + i, *line)
                    for i, line in enumerate(lines)
                )
            if rows:
                self.passes += 1
                with self.db.session() as s:
                    step_logs.step_log_insert_batch(s, rows)
        except Exception as exc:
            self.on_error(exc, len(rows))
        finally:
            for log in held:
                log.flush_lock.release()


class StepLogs:
    """The step-log capture of one started client: ``cap`` bytes per attempt (0: off),
    lines flushed while the attempt runs every ``flush_interval`` seconds at most (see
    :class:`Flusher`)."""

    def __init__(
        self,
        db: Database,
        cap: int,
        logger: logging.Logger,
        reporter: Reporter | None = None,
        flush_interval: float = 1.0,
    ) -> None:
        self.db = db
        self.cap = cap
        self.log = logger
        self.reporter = reporter or Reporter(logger)
        self.flush_interval = flush_interval
        self.flusher: Flusher | None = None
        self._started = False

    def start(self) -> None:
        """Install the proxies and the capture handler (a no-op when off)."""
        if self.cap > 0 and not self._started:
            self._started = True
            self.flusher = Flusher(self.db, self.flush_interval, self._flush_failed)
            install()

    def stop(self, timeout: float = 5.0) -> None:
        """Undo :meth:`start` (the flusher writes what it holds first, waited for up to
        ``timeout`` seconds)."""
        if self._started:
            self._started = False
            if self.flusher is not None:
                self.flusher.stop(timeout)
            uninstall()

    def capture(self, step: ClaimedStep | None = None) -> _Capture:
        """Capture the calling thread's output and records for the block (one handler
        call); yields the attempt's buffer (None when off). With ``step``, its lines are
        flushed while the block runs. An exception leaving the block adds ``the handler
        raised EXCEPTION`` and its traceback (its cause's, when it wraps one) as a last
        ``log`` line."""
        if not self._started:
            return _Capture(None)
        flusher = self.flusher
        notify = flusher.mark if step is not None and flusher is not None else None
        return _Capture(AttemptLog(self.cap, step, notify))

    def write(self, step: ClaimedStep, log: AttemptLog | None) -> None:
        """Store the attempt's lines not flushed yet (nothing when there are none), after
        any batch of them the flusher is writing. A failure is logged."""
        if log is None:
            return
        with log.flush_lock:
            first, lines = log.take()
            if not lines:
                return
            try:
                with self.db.session() as s:
                    step_logs.step_log_insert_many(
                        s,
                        run_id=step.run_id,
                        node=step.node,
                        attempt=step.attempt,
                        generation=step.lease_generation,
                        lines=lines,
                        first_seq=first,
                    )
            except Exception as exc:
                self.reporter.trouble(
                    "completion",
                    exc,
                    "could not store %d log line(s) of step %s of run %s",
                    len(lines),
                    step.node,
                    step.run_id,
                )

    def _flush_failed(self, exc: BaseException, lines: int) -> None:
        self.reporter.trouble(
            "completion", exc, "could not store %d log line(s) of running steps", lines
        )

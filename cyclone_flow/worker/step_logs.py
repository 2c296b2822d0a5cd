"""Step logs (issue 18): what a handler logs and prints during one attempt, kept in
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
a last line saying how much was cut; an exception escaping the handler adds its
traceback. :meth:`StepLogs.write` stores the lines in one INSERT right after the attempt's
completion or failure is recorded, on the worker thread, holding no other connection
(a crash before it loses that attempt's lines; a reader may see the step finished a moment
before its lines). A failed write is logged and drops the lines, never the step.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import threading
import traceback
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TextIO

from cyclone_flow.db import step_logs
from cyclone_flow.db.conn import Database
from cyclone_flow.db.rows import ClaimedStep
from cyclone_flow.events import Reporter
from cyclone_flow.logs import LOGGER_NAME, has_other_handler

__all__ = ["AttemptLog", "CaptureHandler", "StepLogger", "StepLogs", "ThreadStream", "current"]

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


class AttemptLog:
    """The lines of one attempt, ``(at, stream, level, message)`` each, kept up to
    ``cap`` bytes of UTF-8 message text; ``dropped`` counts the bytes cut after that. A
    stream's partial line waits for its newline (or :meth:`close`)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.lines: list[tuple[datetime, str, str | None, str]] = []
        self.size = 0
        self.dropped = 0
        self._partial: dict[str, str] = {}
        self._last_record: logging.LogRecord | None = None

    def add(self, stream: str, level: str | None, message: str) -> None:
        """Keep one line (NUL characters replaced: Postgres text cannot hold them)."""
        message = message.replace("\x00", "\ufffd")
        size = len(message.encode("utf-8", "replace"))
        if self.dropped or self.size + size > self.cap:
            self.dropped += size
            return
        self.size += size
        self.lines.append((datetime.now(UTC), stream, level, message))

    def write(self, stream: str, text: str) -> None:
        """Text written to ``stream`` (``stdout``/``stderr``): one line per newline."""
        text = self._partial.pop(stream, "") + text
        *whole, rest = text.split("\n")
        for line in whole:
            self.add(stream, None, line)
        if rest:
            self._partial[stream] = rest

    def record(self, record: logging.LogRecord, text: str) -> None:
        """A logging record (once, though two capture handlers see it)."""
        if record is self._last_record:
            return
        self._last_record = record
        self.add("log", record.levelname, text)

    def flush(self) -> None:
        """Keep the partial lines (written without their newline) as lines."""
        for stream, rest in sorted(self._partial.items()):
            self.add(stream, None, rest)
        self._partial.clear()

    def close(self) -> None:
        """Flush the partial lines, then mark the cut (if any) with a last line."""
        self.flush()
        if self.dropped:
            self.lines.append(
                (
                    datetime.now(UTC),
                    "log",
                    "WARNING",
                    f"[cyclone-flow] {self.dropped} more bytes of this attempt's logs were cut "
                    f"(step_log_bytes = {self.cap})",
                )
            )


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
        if self.log is not None:
            _local.log = self.log
        return self.log

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
            log.close()


class StepLogs:
    """The step-log capture of one started client: ``cap`` bytes per attempt (0: off)."""

    def __init__(
        self, db: Database, cap: int, logger: logging.Logger, reporter: Reporter | None = None
    ) -> None:
        self.db = db
        self.cap = cap
        self.log = logger
        self.reporter = reporter or Reporter(logger)
        self._started = False

    def start(self) -> None:
        """Install the proxies and the capture handler (a no-op when off)."""
        if self.cap > 0 and not self._started:
            self._started = True
            install()

    def stop(self) -> None:
        """Undo :meth:`start`."""
        if self._started:
            self._started = False
            uninstall()

    def capture(self) -> _Capture:
        """Capture the calling thread's output and records for the block (one handler
        call); yields the attempt's buffer (None when off). An exception leaving the block
        adds ``the handler raised EXCEPTION`` and its traceback (its cause's, when it wraps
        one) as a last ``log`` line."""
        return _Capture(AttemptLog(self.cap) if self._started else None)

    def write(self, step: ClaimedStep, log: AttemptLog | None) -> None:
        """Store the attempt's lines (nothing when there are none). A failure is logged."""
        if log is None or not log.lines:
            return
        try:
            with self.db.session() as s:
                step_logs.step_log_insert_many(
                    s,
                    run_id=step.run_id,
                    node=step.node,
                    attempt=step.attempt,
                    generation=step.lease_generation,
                    lines=log.lines,
                )
        except Exception as exc:
            self.reporter.trouble(
                "completion",
                exc,
                "could not store %d log line(s) of step %s of run %s",
                len(log.lines),
                step.node,
                step.run_id,
            )

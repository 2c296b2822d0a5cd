"""File descriptors 1 and 2 of a CLI process that runs handlers (issue 31.3).

``sys.stdout``'s proxy (:mod:`cyclone_flow.worker.step_logs`) keeps what a handler's thread
``print``s, but not what reaches the descriptors themselves: a child process the handler
runs (``subprocess.run(["echo", ...])``) or ``os.write(1, ...)``. That went to the CLI's
stdout, before ``run --json``'s document. :class:`HandlerOutput` points descriptors 1 and 2
at pipes while handlers run; one thread reads them and puts what arrives into the step
logs of the one attempt the process runs (``stdout`` / ``stderr`` lines), or, when none or
several run, onto the CLI's stderr (the process log). The CLI's own output goes to
duplicates of the original descriptors: ``sys.stderr`` is replaced by a stream on the
duplicate (and so are the streams of logging handlers that wrote to the old one), and
``sys.stdout`` is not written by the CLI until :meth:`HandlerOutput.close` restored
descriptor 1. At the end of every attempt the pipes are drained first, so what a child
wrote before the handler returned is that attempt's.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import logging
import os
import select
import sys
import threading
from typing import Any, TextIO

from cyclone_flow.worker import step_logs

__all__ = ["HandlerOutput"]

_READ = 65_536


class HandlerOutput:
    """Descriptors 1 and 2 redirected to pipes until :meth:`close` (made by
    :meth:`start`; POSIX only, a no-op elsewhere or when a descriptor is closed)."""

    def __init__(self) -> None:
        self.active = False
        self._lock = threading.Lock()
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")
        }

    @classmethod
    def start(cls) -> HandlerOutput:
        """Redirect descriptors 1 and 2 and start the reader thread."""
        out = cls()
        out._start()
        return out

    def _start(self) -> None:
        try:
            saved = os.dup(1), os.dup(2)
        except OSError:
            return  # a closed descriptor: nothing to keep apart
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = saved
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        self._stop_r, self._stop_w = os.pipe()
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.close(out_w)
        os.close(err_w)
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
        self._pipes = {out_r: "stdout", err_r: "stderr"}
        self._old_stderr = sys.stderr
        encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
        self.stderr: TextIO = io.TextIOWrapper(
            io.FileIO(saved[1], "w", closefd=False),
            encoding=encoding,
            errors="backslashreplace",
            line_buffering=True,
            write_through=True,
        )
        sys.stderr = self.stderr
        self._handlers = _retarget(self._old_stderr, self.stderr)
        self._thread = threading.Thread(target=self._loop, name="cyclone-fd-output", daemon=True)
        self._thread.start()
        step_logs.set_drain(self.drain)
        self.active = True

    def drain(self) -> None:
        """Read what the pipes hold now and hand it on (never blocks on the pipes)."""
        with self._lock:
            for fd, stream in self._pipes.items():
                while True:
                    try:
                        data = os.read(fd, _READ)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        break  # closed under us
                    if not data:
                        break
                    self._dispatch(stream, data)

    def _dispatch(self, stream: str, data: bytes) -> None:
        text = self._decoders[stream].decode(data)
        if not text:
            return
        attempt = step_logs.sole_running()
        if attempt is not None:
            attempt.write(stream, text)
            return
        with contextlib.suppress(OSError, ValueError):  # the terminal went away
            self.stderr.write(text)

    def _loop(self) -> None:
        fds = [*self._pipes, self._stop_r]
        while True:
            try:
                ready, _, _ = select.select(fds, [], [])
            except InterruptedError:
                continue
            except (OSError, ValueError):
                return
            if self._stop_r in ready:
                return
            self.drain()

    def close(self) -> None:
        """Put descriptors 1 and 2 and ``sys.stderr`` back; what the pipes still hold
        goes on as before."""
        if not self.active:
            return
        self.active = False
        step_logs.set_drain(None)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        os.write(self._stop_w, b"x")
        self._thread.join(5.0)
        self.drain()
        for fd in (*self._pipes, self._stop_r, self._stop_w, *self._saved):
            os.close(fd)
        self._pipes = {}
        _retarget(self.stderr, self._old_stderr, self._handlers)
        if sys.stderr is self.stderr:
            sys.stderr = self._old_stderr
        self.stderr.flush()


def _retarget(
    old: object, new: TextIO, handlers: list[logging.StreamHandler[Any]] | None = None
) -> list[logging.StreamHandler[Any]]:
    """Point the logging stream handlers writing to ``old`` (of every logger, or only
    ``handlers``) at ``new``; return them."""
    if handlers is None:
        loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
        handlers = [
            h
            for lg in loggers
            if isinstance(lg, logging.Logger)
            for h in lg.handlers
            if isinstance(h, logging.StreamHandler) and h.stream is old
        ]
    for h in handlers:
        h.setStream(new)
    return handlers

"""The real ``cyclone-flow`` script on a pseudo-terminal (its stdin, stdout and stderr are
one pty, as in a user's terminal), and what a terminal would show of its output.

:class:`PtyProcess` starts the command and keeps reading what it writes (a thread), so
a test can wait for text (the bar being drawn), type an answer, send a signal, and read
the exit code. :func:`screen` replays the raw output as a terminal draws it (carriage
return, newline, cursor up, erase line; other escapes ignored), so a test can tell a
line that was drawn over the bar from one that was printed above it.
"""

from __future__ import annotations

import os
import pty
import re
import signal
import struct
import subprocess
import termios
import threading
import time
from fcntl import ioctl
from pathlib import Path

from helpers.cli import clean_env
from helpers.paths import CLI

COLUMNS = 200


def _as_a_foreground_job() -> None:
    """In the child before exec: Ctrl-C (SIGINT) and SIGQUIT with their default action, as
    a terminal's foreground job has them. A suite started in the background of a
    non-interactive shell (``pytest &``, ``nohup``) ignores both, and an ignored signal stays
    ignored across exec: the CLI would then never see the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


class PtyProcess:
    """``cyclone-flow ARGS`` with a pty of ``columns`` (default ``COLUMNS``) columns as
    stdin/stdout/stderr."""

    def __init__(
        self,
        *args: str | Path,
        cwd: str | Path | None = None,
        env: dict[str, str] | None = None,
        columns: int = COLUMNS,
    ) -> None:
        master, slave = pty.openpty()
        ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
        base = env if env is not None else clean_env()
        self.proc = subprocess.Popen(
            [str(CLI), *map(str, args)],
            cwd=cwd,
            env={**base, "TERM": "xterm-256color", "COLUMNS": str(columns)},
            stdin=slave,
            stdout=slave,
            stderr=slave,
            close_fds=True,
            start_new_session=True,  # a process group of its own: signals reach it alone
            preexec_fn=_as_a_foreground_job,
        )
        os.close(slave)
        self.master = master
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the last process holding the pty closed it
                return
            if not data:
                return
            with self._lock:
                self._chunks.append(data)

    @property
    def raw(self) -> str:
        """Everything written so far, escapes included."""
        with self._lock:
            return b"".join(self._chunks).decode("utf-8", errors="replace")

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        """Wait until ``text`` appears on the screen; fail naming what was shown."""
        deadline = time.monotonic() + timeout
        while text not in "\n".join(screen(self.raw)):
            if time.monotonic() >= deadline or self.proc.poll() is not None:
                if text in "\n".join(screen(self.raw)):
                    return
                raise AssertionError(f"{text!r} not shown; screen:\n" + "\n".join(screen(self.raw)))
            time.sleep(0.02)

    def type(self, text: str) -> None:
        """Type ``text`` (e.g. ``"n\\n"``) on the terminal."""
        os.write(self.master, text.encode())

    def wait(self, timeout: float = 120.0) -> int:
        """The exit code (SIGKILL after ``timeout``); the output is read to its end."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(5)
        os.close(self.master)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b[()][A-Za-z0-9]|\x1b[=>78]|\x1b\][^\x07]*\x07")


def screen(raw: str) -> list[str]:
    """The lines a terminal shows after ``raw``: text overwrites the cells at the cursor;
    ``\\r`` goes to column 0, ``\\n`` to the next line, ``ESC[nA`` up n lines, ``ESC[2K``
    erases the line, ``ESC[K`` its rest; other escapes (colours, cursor on/off) change
    nothing. No line wrapping (the pty is wide)."""
    lines: list[list[str]] = [[]]
    row = col = 0
    pos = 0
    text = raw
    while pos < len(text):
        m = _CSI.match(text, pos)
        if m is not None:
            pos = m.end()
            arg, final = m.group(1), m.group(2)
            if final == "A":
                row = max(0, row - int(arg or 1))
            elif final == "K":
                if arg == "2":
                    lines[row] = []
                else:
                    del lines[row][col:]
            continue
        ch = text[pos]
        pos += 1
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row += 1
            col = 0
            while len(lines) <= row:
                lines.append([])
        elif ch >= " " or ch == "\t":
            line = lines[row]
            while len(line) < col:
                line.append(" ")
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
    return ["".join(line).rstrip() for line in lines]

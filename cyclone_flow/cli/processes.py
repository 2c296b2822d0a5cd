"""``cyclone-flow worker --processes N``: a supervisor that runs N worker processes on one
host, so its cores are used past the GIL.

The supervisor imports no handler and keeps no database connection (it may start or join
the embedded Postgres, whose URL it hands to the children; the ``worker`` command says once
which database is used and checks on one short connection that its schema is migrated
before it starts any child: exit 2 when not). It starts N children, each
the same command line with ``--processes 1`` appended (click keeps an option's last
value), so each child is a plain ``cyclone-flow worker`` with its own ``Client``, pool,
client id and ``cyclone_workers`` row. With ``--client-id ID`` child *i* gets ``ID-i``,
with ``--metrics-port P`` (P > 0) it serves on port ``P + i - 1``.

- SIGTERM or SIGINT to the supervisor is forwarded to every child (the worker's graceful
  shutdown); the supervisor waits for them for ``stop_timeout`` seconds, SIGKILLs the ones
  still running (saying so) and exits 0 when every child stopped cleanly, else 1.
- A child that exits on its own with 0 (``--exit-when-idle``) is not restarted; the
  supervisor exits 0 once every child did.
- A child that exits with 2 (a usage or configuration mistake, e.g. a schema that is
  not migrated, which a restart would repeat) is not restarted and stops the others; the
  supervisor exits 2.
- Any other exit of a child (a nonzero code, a signal the supervisor did not send) is a
  crash: the child is restarted after a backoff of 0.5 s doubling to 30 s, reset once it
  ran for :data:`STABLE_S`, and one line names the child, its exit code or signal and
  the delay.

A child learns its supervisor's pid from ``CYCLONE_FLOW_SUPERVISOR_PID`` and stops
gracefully when the supervisor is gone (e.g. SIGKILLed), instead of running orphaned.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BACKOFF_MAX_S",
    "BACKOFF_MIN_S",
    "STABLE_S",
    "SUPERVISOR_PID_ENV",
    "child_command",
    "describe_exit",
    "run_processes",
    "stop_children",
    "supervisor_pid",
]

LOG = logging.getLogger("cyclone_flow")

SUPERVISOR_PID_ENV = "CYCLONE_FLOW_SUPERVISOR_PID"
"""Environment variable naming the supervisor's pid in each worker child."""

BACKOFF_MIN_S = 0.5
"""Delay before restarting a child after its first crash (seconds)."""

BACKOFF_MAX_S = 30.0
"""Cap of the doubling restart delay (seconds)."""

STABLE_S = 60.0
"""A child that ran this long before crashing is restarted after :data:`BACKOFF_MIN_S`."""

_TICK_S = 0.1
"""How often the supervisor looks at its children and the stop flag (seconds)."""

_FORWARDED = (signal.SIGTERM, signal.SIGINT)
"""The signals that stop the supervisor; the first one received is sent to the children."""

_USAGE_EXIT = 2
"""A child's exit code for a usage or configuration mistake: not restarted."""


def child_command(argv: Sequence[str], flag: str = "--reload") -> list[str]:
    """The interpreter's command line ``argv`` (``sys.orig_argv``) with the interpreter
    replaced by ``sys.executable`` and every ``flag`` token removed."""
    return [sys.executable, *(a for a in list(argv)[1:] if a != flag)]


def supervisor_pid() -> int | None:
    """In a worker child, its supervisor's pid (removed from the environment, so processes
    a handler starts do not inherit it); None elsewhere or when the value is not a pid."""
    value = os.environ.pop(SUPERVISOR_PID_ENV, None)
    try:
        return int(value) if value else None
    except ValueError:
        return None


def describe_exit(code: int) -> str:
    """``exited with code N`` or ``was killed by SIGNAME`` for a ``Popen.returncode``."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"was killed by {name}"


def stop_children(
    children: Sequence[tuple[str, subprocess.Popen[Any]]],
    timeout: float,
    signum: int = signal.SIGTERM,
) -> list[int]:
    """Send ``signum`` to every child still running, wait up to ``timeout`` seconds in all
    for them to exit, then SIGKILL the rest (one warning each, naming the child as in
    ``children``: ``(name, process)`` pairs). Their exit codes, in order."""
    for _, child in children:
        if child.poll() is None:
            child.send_signal(signum)
    deadline = time.monotonic() + timeout
    for name, child in children:
        try:
            child.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            LOG.warning("%s did not stop within %.0f s; killing it", name, timeout)
            child.kill()
    return [child.wait() for _, child in children]


def _count(n: int) -> str:
    return "1 worker process" if n == 1 else f"{n} worker processes"


@dataclass
class _Slot:
    """Child ``index`` (1-based) of the supervisor: its process, when it started, the delay
    before its next restart and when that restart is due."""

    index: int
    command: list[str]
    proc: subprocess.Popen[Any] | None = None
    started: float = 0.0
    delay: float = BACKOFF_MIN_S
    restart_at: float | None = None
    done: bool = False

    @property
    def name(self) -> str:
        pid = f" (pid {self.proc.pid})" if self.proc is not None else ""
        return f"processes: worker {self.index}{pid}"


def run_processes(
    commands: Sequence[list[str]],
    stop_timeout: float,
    stop: threading.Event | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Run one child per command of ``commands`` (child *i* runs ``commands[i - 1]``) and
    supervise them as the module docstring says until a stop; return the supervisor's
    exit code (0 after a clean stop). ``stop``: an event set by a signal before this call
    (then no child is started); ``env``: the children's environment (default: this
    process's), to which the supervisor's pid is added; ``stop_timeout``: seconds the
    children may take to exit after the forwarded signal before SIGKILL."""
    stop = stop or threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        if not received:
            LOG.info("%s: stopping the %s", signal.Signals(signum).name, _count(len(commands)))
        received.append(signum)
        stop.set()

    previous = {signum: signal.signal(signum, on_signal) for signum in _FORWARDED}
    try:
        return _supervise(commands, stop_timeout, stop, received, env)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _supervise(
    commands: Sequence[list[str]],
    stop_timeout: float,
    stop: threading.Event,
    received: list[int],
    env: dict[str, str] | None,
) -> int:
    """The body of :func:`run_processes`; ``received``: the signals the supervisor got."""
    child_env = dict(os.environ if env is None else env)
    child_env[SUPERVISOR_PID_ENV] = str(os.getpid())
    slots = [_Slot(i, list(command)) for i, command in enumerate(commands, start=1)]
    if stop.is_set():
        return 0

    def start(slot: _Slot) -> None:
        restart = slot.proc is not None
        slot.proc = subprocess.Popen(slot.command, env=child_env)
        slot.started = time.monotonic()
        slot.restart_at = None
        if restart:
            LOG.info("%s: restarted", slot.name)

    for slot in slots:
        start(slot)
    LOG.info(
        "processes: started %s (pids %s)",
        _count(len(slots)),
        ", ".join(str(s.proc.pid) for s in slots if s.proc is not None),
    )
    usage_error = False
    while not stop.wait(_TICK_S):
        now = time.monotonic()
        for slot in slots:
            if slot.done or slot.proc is None:
                continue
            if slot.restart_at is not None:
                if now >= slot.restart_at:
                    start(slot)
                continue
            code = slot.proc.poll()
            if code is None:
                continue
            if code == 0:
                LOG.info("%s exited with code 0; not restarting it", slot.name)
                slot.done = True
                continue
            if code == _USAGE_EXIT:
                LOG.error(
                    "%s exited with code 2 (a usage or configuration error); stopping",
                    slot.name,
                )
                usage_error = True
                slot.done = True
                stop.set()
                break
            if now - slot.started >= STABLE_S:
                slot.delay = BACKOFF_MIN_S
            LOG.warning(
                "%s %s; restarting it in %.1f s", slot.name, describe_exit(code), slot.delay
            )
            slot.restart_at = now + slot.delay
            slot.delay = min(slot.delay * 2, BACKOFF_MAX_S)
        if all(slot.done for slot in slots):
            LOG.info("processes: every worker process exited")
            return _USAGE_EXIT if usage_error else 0
    running = [
        (slot.name, slot.proc)
        for slot in slots
        if slot.proc is not None and slot.restart_at is None and not slot.done
    ]
    forwarded = received[0] if received else signal.SIGTERM
    codes = stop_children(running, stop_timeout, forwarded)
    unclean = [
        f"{name} {describe_exit(code)}"
        for (name, _), code in zip(running, codes, strict=True)
        # a child signalled before its handlers were installed had claimed nothing
        if code not in (0, -signal.SIGTERM, -signal.SIGINT)
    ]
    if usage_error:
        return _USAGE_EXIT
    if unclean:
        LOG.error("processes: not a clean stop: %s", "; ".join(unclean))
        return 1
    LOG.info("processes: every worker process stopped")
    return 0

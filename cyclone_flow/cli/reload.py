"""``cyclone-flow worker --reload``: a supervisor that runs the worker as a child process
and restarts it when a ``.py`` file under its import paths changes.

The supervisor imports no handler and opens no database connection: it starts the same
command line without ``--reload`` as a child, watches the folders with ``watchfiles``
(``.py`` files only; ``.venv``, ``.git``, ``__pycache__`` and the like are ignored), and on a
change sends the child SIGTERM (the worker's graceful shutdown: running handlers get
``--shutdown-timeout``, then their leases are released), waits for it to exit and starts a
new one, which imports the handlers afresh. SIGTERM or SIGINT to the supervisor stops the
child the same way and exits with its exit code; a child that exits on its own (e.g.
``--exit-when-idle``) ends the supervisor with its exit code.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cyclone_flow.cli.processes import child_command, stop_children

__all__ = ["child_command", "supervise"]

LOG = logging.getLogger("cyclone_flow")

_POLL_MS = 200
"""How often the watch loop looks at the stop flag and the child (milliseconds)."""


def supervise(command: list[str], folders: Sequence[str], stop_timeout: float) -> int:
    """Run ``command`` as a child and restart it on each change of a ``.py`` file under
    ``folders``; return the exit code of the last child (see the module docstring).
    ``stop_timeout``: seconds a child may take to exit after SIGTERM before SIGKILL."""
    import watchfiles  # only the supervisor needs it

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        LOG.info("%s: stopping the worker", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    paths = sorted({str(Path(f).resolve()) for f in folders})
    LOG.info("reload: watching .py files under %s", ", ".join(paths))
    child = subprocess.Popen(command)
    try:
        for changes in watchfiles.watch(
            *paths,
            watch_filter=watchfiles.PythonFilter(),
            stop_event=stop,
            rust_timeout=_POLL_MS,
            yield_on_timeout=True,
            raise_interrupt=False,
            debounce=200,
            step=50,
        ):
            if child.poll() is not None:
                return child.returncode
            if not changes:
                continue
            names = sorted({Path(p).name for _, p in changes})
            LOG.info("reload: %s changed; restarting the worker", ", ".join(names))
            _stop(child, stop_timeout)
            child = subprocess.Popen(command)
    finally:
        code = _stop(child, stop_timeout)
    return code


def _stop(child: subprocess.Popen[Any], timeout: float) -> int:
    """SIGTERM ``child`` (when still running) and wait for it; SIGKILL after ``timeout``
    seconds. Its exit code."""
    return stop_children([("reload: the worker", child)], timeout)[0]

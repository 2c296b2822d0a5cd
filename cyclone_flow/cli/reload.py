"""``cyclone-flow worker --reload``: a supervisor that runs the worker as a child process
and restarts it when a ``.py`` file of the modules it may import changes.

The supervisor imports no handler and opens no database connection: it starts the same
command line without ``--reload`` as a child, watches (:func:`watch_set`) each
``--import-path`` folder and the folder of each ``--allow-module`` package (found as
Python would, without importing it: a module file alone, not its whole folder), never
the whole current folder unless none is found, with ``watchfiles`` (``.py`` files only;
``.venv``, ``.git``, ``__pycache__`` and the like are ignored), logs the changed paths,
and on a change sends the child SIGTERM (the worker's graceful shutdown: running handlers get
``--shutdown-timeout``, then their leases are released), waits for it to exit and starts a
new one, which imports the handlers afresh. SIGTERM or SIGINT to the supervisor stops the
child the same way and exits with its exit code; a child that exits on its own (e.g.
``--exit-when-idle``) ends the supervisor with its exit code.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cyclone_flow.cli.processes import child_command, stop_children

__all__ = ["WatchSet", "child_command", "supervise", "watch_set"]

LOG = logging.getLogger("cyclone_flow")

_POLL_MS = 200
"""How often the watch loop looks at the stop flag and the child (milliseconds)."""


@dataclass(frozen=True)
class WatchSet:
    """What ``--reload`` watches: ``trees``, folders every ``.py`` file below which counts
    (an import path, an allowed package), and ``files``, module files that count alone
    (an allowed module that is one file: its folder is watched for it, the rest of that
    folder is not); absolute paths. ``roots``: the folders handed to ``watchfiles``."""

    trees: tuple[str, ...]
    files: tuple[str, ...] = ()

    @property
    def roots(self) -> tuple[str, ...]:
        folders = {*self.trees, *(os.path.dirname(f) for f in self.files)}
        return tuple(sorted(folders))

    def counts(self, path: str) -> bool:
        """Whether a change of ``path`` (absolute) restarts the worker."""
        return path in self.files or any(
            path == tree or path.startswith(tree + os.sep) for tree in self.trees
        )


def watch_set(prefixes: Sequence[str], import_paths: Sequence[str], cwd: str) -> WatchSet:
    """The :class:`WatchSet` of a worker allowed ``prefixes`` (module prefixes) with
    ``import_paths`` (``--import-path`` folders) started in ``cwd``: each import path,
    and where each prefix is found as the worker finds it (the current folder and the
    import paths first, then ``sys.path``), located without running any of its code (a
    top-level name's spec; a dotted prefix's folder or file below it). The current
    folder only when nothing is found (a package not written yet)."""
    search = [str(Path(p).resolve()) for p in (cwd, *import_paths)]
    trees = {str(Path(p).resolve()) for p in import_paths}
    files: set[str] = set()
    for prefix in prefixes:
        top, _, rest = prefix.partition(".")
        found = _locate(top, search)
        if found is None:
            continue
        if rest and os.path.isdir(found):
            below = os.path.join(found, *rest.split("."))
            if os.path.isdir(below):
                found = below
            elif os.path.isfile(below + ".py"):
                found = below + ".py"
        (trees if os.path.isdir(found) else files).add(found)
    if not trees and not files:
        trees.add(str(Path(cwd).resolve()))
    # a folder or a file inside another tree: that tree holds it
    kept = [t for t in trees if not any(t.startswith(o + os.sep) for o in trees)]
    alone = [f for f in files if not any(f.startswith(t + os.sep) for t in kept)]
    return WatchSet(tuple(sorted(kept)), tuple(sorted(alone)))


def _locate(top: str, search: Sequence[str]) -> str | None:
    """The folder of package ``top`` or its module file, as an import would find it
    (``search`` first, then ``sys.path`` and the installed finders); None when not found
    or not a file on disk (a builtin). Imports nothing: only a top-level name's spec."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(top, list(search))
        if spec is None:
            spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or ())
    if locations:
        return str(Path(locations[0]).resolve())
    if spec.origin and os.path.isfile(spec.origin):
        return str(Path(spec.origin).resolve())
    return None


def _shown(path: str, cwd: str) -> str:
    """``path`` relative to ``cwd`` when below it, else as is."""
    try:
        return os.path.relpath(path, cwd) if Path(path).is_relative_to(cwd) else path
    except ValueError:
        return path


def supervise(command: list[str], folders: Sequence[str] | WatchSet, stop_timeout: float) -> int:
    """Run ``command`` as a child and restart it on each change of a ``.py`` file under
    ``folders`` (folders, or a :class:`WatchSet`); return the exit code of the last child
    (see the module docstring). ``stop_timeout``: seconds a child may take to exit after
    SIGTERM before SIGKILL."""
    import watchfiles  # only the supervisor needs it

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        LOG.info("%s: stopping the worker", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    watched = (
        folders
        if isinstance(folders, WatchSet)
        else WatchSet(tuple(sorted({str(Path(f).resolve()) for f in folders})))
    )
    cwd = str(Path.cwd())
    LOG.info(
        "reload: watching .py files under %s",
        ", ".join(_shown(p, cwd) for p in (*watched.trees, *watched.files)),
    )
    python = watchfiles.PythonFilter()

    def wanted(change: Any, path: str) -> bool:
        return python(change, path) and watched.counts(path)

    child = subprocess.Popen(command)
    try:
        for changes in watchfiles.watch(
            *watched.roots,
            watch_filter=wanted,
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
            names = sorted({_shown(p, cwd) for _, p in changes})
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

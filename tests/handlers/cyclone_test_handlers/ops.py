"""Handlers of the operations tests: payload sizes, graceful shutdown, metrics."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def sized_output(ctx: Any, input: Any) -> Any:
    """Return a JSON string whose encoding is exactly ``input["bytes"]`` bytes."""
    return "x" * (int(input["bytes"]) - 2)


def cooperative_once(ctx: Any, input: Any) -> Any:
    """The first call (no ``marker`` file yet) creates the marker and runs until told to
    stop (``ctx.cancelled()``, at most ``max_wait`` seconds), like a long cooperative
    handler; later calls return at once. Returns the pid and whether it was told; when
    told, also creates the ``told`` file (if given), whatever becomes of the completion."""
    marker = Path(input["marker"])
    told = False
    if not marker.exists():
        marker.write_text(str(os.getpid()), encoding="utf-8")
        told = ctx.wait_cancelled(float(input.get("max_wait", 120)))
        if told and input.get("told"):
            Path(input["told"]).write_text(str(os.getpid()), encoding="utf-8")
    return {"pid": os.getpid(), "cancelled": told}


def short_sleep(ctx: Any, input: Any) -> Any:
    """Create ``marker`` (the test's sign that the handler runs), sleep ``seconds``, then
    return the pid: a handler that finishes within a shutdown grace period."""
    Path(input["marker"]).write_text(str(os.getpid()), encoding="utf-8")
    time.sleep(float(input["seconds"]))
    return {"pid": os.getpid()}


def flaky(ctx: Any, input: Any) -> Any:
    """Fail every attempt before ``input["succeed_on"]`` (default 2), then return."""
    if ctx.attempt < int(input.get("succeed_on", 2)):
        raise RuntimeError(f"flaky attempt {ctx.attempt}")
    return {"attempt": ctx.attempt}


def always_fails(ctx: Any, input: Any) -> Any:
    """Raise on every attempt."""
    raise RuntimeError("always fails")

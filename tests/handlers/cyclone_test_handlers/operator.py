"""Handlers for the operator-action tests: a switchable failure and a gate."""

from __future__ import annotations

import threading
from typing import Any

from cyclone_flow import PermanentError

FAIL = {"on": True}
GATE = threading.Event()


def flaky(ctx: Any, input: Any) -> Any:
    """Fails while ``FAIL["on"]``; returns the attempt number otherwise."""
    if FAIL["on"]:
        raise RuntimeError("flaky is failing")
    return {"attempt": ctx.attempt}


def permanent(ctx: Any, input: Any) -> Any:
    """Raises PermanentError: the step is discarded without further attempts."""
    raise PermanentError("do not retry me")


def gated(ctx: Any, input: Any) -> Any:
    """Waits (up to 10 s) for GATE, then returns."""
    GATE.wait(10)
    return {"gated": True}

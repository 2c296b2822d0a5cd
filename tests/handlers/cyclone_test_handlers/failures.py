"""Handlers for the failure-semantics tests (tests/integration/test_failure_rules.py)."""

from __future__ import annotations

import os
import signal
from typing import Any


def die(ctx: Any, input: Any) -> Any:
    """Append ``attempt pid`` to the file ``input["log"]``, then SIGKILL its own worker
    process: a handler that stops its worker on every call (Client Options:
    WithMaxReclaims)."""
    with open(input["log"], "a", encoding="utf-8") as fh:
        fh.write(f"{ctx.attempt} {os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def fails_while_flag(ctx: Any, input: Any) -> Any:
    """Raise while the file ``input["flag"]`` exists; return ``{"attempt": n}`` once it is
    gone (an outage an operator fixes before ``retry``)."""
    if os.path.exists(input["flag"]):
        raise RuntimeError(f"outage: {os.path.basename(input['flag'])} is present")
    return {"attempt": ctx.attempt}

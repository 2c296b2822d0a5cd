"""Handlers for the flow-control tests (concurrency and rate limits, docs/flow-control.md)."""

from __future__ import annotations

import os
from typing import Any


def hold(ctx: Any, input: Any) -> Any:
    """Run for ``input["ms"]`` milliseconds (0 when absent), or for ``LIMITS_HOLD_S``
    seconds when that is set in this process's environment (a worker the test will
    SIGKILL while it holds its slots), unless cancelled first."""
    held = os.environ.get("LIMITS_HOLD_S")
    seconds = float(held) if held else float((input or {}).get("ms", 0)) / 1000.0
    if seconds > 0:
        ctx.wait_cancelled(seconds)
    return {"node": ctx.node}

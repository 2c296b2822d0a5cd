"""Handlers that watch their own lease (``ctx.lease_lost``), for in-process tests: each
reports through the events of :func:`cyclone_test_handlers.engine.event`, keyed by the
test's ``input["key"]``."""

from __future__ import annotations

import time
from typing import Any

from cyclone_test_handlers.engine import _record, event


def until_lease_lost(ctx: Any, input: Any) -> Any:
    """Set ``entered``, then poll ``ctx.lease_lost`` every 20 ms for up to
    ``input["seconds"]``; when it is set, record whether ``ctx.cancelled()`` was too and
    set ``lost``. Returns whether the lease was lost."""
    key = input["key"]
    event(key, "entered").set()
    deadline = time.monotonic() + float(input["seconds"])
    while time.monotonic() < deadline:
        if ctx.lease_lost.is_set():
            _record(key, cancelled=ctx.cancelled())
            event(key, "lost").set()
            return {"lost": True}
        time.sleep(0.02)
    return {"lost": False}

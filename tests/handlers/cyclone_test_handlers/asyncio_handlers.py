"""``async def`` handlers: run on the worker's event loop. In-process tests
coordinate with them through the registries of :mod:`cyclone_test_handlers.engine`, keyed
by a test-chosen ``key``; writes go to ``<schema>.ledger`` through ``ctx.completion_tx()``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

from cyclone_test_handlers.engine import _record, event, write_ledger

_log = logging.getLogger("cyclone_test_handlers.asyncio_handlers")


async def double(ctx: Any, input: Any) -> Any:
    """``{"n": x}`` -> ``{"doubled": 2x, "thread": the loop thread's name}``, after a yield
    to the loop; prints and logs one line each (captured in the step's logs)."""
    await asyncio.sleep(0)
    print(f"async print {input['n']}")
    ctx.log.info("async ctx.log %s", input["n"])
    _log.warning("async logging %s", input["n"])
    return {"doubled": 2 * input["n"], "thread": threading.current_thread().name}


async def write(ctx: Any, input: Any) -> Any:
    """One ledger row through ``ctx.completion_tx()`` (called on the loop thread), a yield,
    a second row through ``asyncio.to_thread(ctx.completion_tx)`` (the same connection);
    raises after both when ``input["raise"]``."""
    write_ledger(ctx, input["schema"], "first")
    await asyncio.sleep(0)
    conn = await asyncio.to_thread(ctx.completion_tx)
    assert conn is ctx.completion_tx()
    write_ledger(ctx, input["schema"], "second")
    if input.get("raise"):
        raise ValueError("async after business write")
    return {"wrote": 2}


async def hang(ctx: Any, input: Any) -> Any:
    """Write a ledger row, set ``entered`` of ``key``, then sleep an hour; records
    ``{"cancelled": True}`` under ``key`` (and sets ``cancelled``) when its task is
    cancelled, in its ``except CancelledError`` (and ``finally``) block."""
    key = input["key"]
    write_ledger(ctx, input["schema"], f"attempt{ctx.attempt}")
    if ctx.attempt > 1:
        return {"attempt": ctx.attempt}
    event(key, "entered").set()
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        _record(key, cancelled=True, saw_ctx_cancelled=ctx.cancelled())
        raise
    finally:
        event(key, "cancelled").set()
    return {"slept": True}


async def crash(ctx: Any, input: Any) -> Any:
    """Raise ``RuntimeError('async boom')`` after a yield."""
    await asyncio.sleep(0)
    raise RuntimeError("async boom")


async def system_exit(ctx: Any, input: Any) -> Any:
    """Raise SystemExit (it must fail the attempt, not stop the shared loop)."""
    raise SystemExit(3)


async def stubborn(ctx: Any, input: Any) -> Any:
    """Sleep ``seconds`` in small steps, swallowing every cancellation of its task (a
    handler that ignores its timeout): the loop must abandon it at shutdown."""
    end = time.monotonic() + float(input["seconds"])
    while time.monotonic() < end:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)
    return {"late": True}

"""Handlers that misbehave on purpose: the engine must fail their attempts cleanly, never
loop, never leak state between steps."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from cyclone_test_handlers import engine


def nul_output(ctx: Any, input: Any) -> Any:
    """Returns a string with a NUL character (jsonb cannot store it)."""
    return {"s": "a\x00b"}


def nul_error(ctx: Any, input: Any) -> Any:
    """Raises with a NUL character in the message (text columns cannot store it)."""
    raise ValueError("bad byte \x00 here")


def surrogate_output(ctx: Any, input: Any) -> Any:
    """Returns a string with a lone surrogate (not UTF-8: Postgres cannot store it)."""
    return {"s": "a\ud800b"}


def surrogate_error(ctx: Any, input: Any) -> Any:
    """Raises with a lone surrogate in the message."""
    raise ValueError("bad char \udcff here")


def swallow_sql_error(ctx: Any, input: Any) -> Any:
    """Makes its completion transaction fail, swallows the error and returns."""
    with contextlib.suppress(Exception):
        ctx.completion_tx().execute("SELECT 1/0")
    return {"ok": True}


def raw_commit(ctx: Any, input: Any) -> Any:
    """Writes a ledger row, then ends the completion transaction with a raw COMMIT."""
    engine.write_ledger(ctx, input["schema"], "committed-behind-the-engine")
    ctx.completion_tx().execute("COMMIT")
    return {"ok": True}


def mutate(ctx: Any, input: Any) -> Any:
    """Mutates its input and an upstream output it got from ctx.upstream."""
    input["tampered"] = True
    up = ctx.upstream("a")
    up["list"].append("tampered")
    return {"seen": input}


def make_list(ctx: Any, input: Any) -> Any:
    """Returns ``{"list": [1, 2]}``."""
    return {"list": [1, 2]}


def twice(ctx: Any, input: Any) -> Any:
    """First call: signal ``entered1``, wait for ``release1``. Later calls: signal
    ``entered2``, then run ``input["second_s"]`` seconds."""
    key = input["key"]
    n = engine._next_call(key)
    if n == 1:
        engine.event(key, "entered1").set()
        engine.event(key, "release1").wait(30)
        return {"call": 1}
    engine.event(key, "entered2").set()
    time.sleep(float(input["second_s"]))
    return {"call": n, "pid": os.getpid()}


def deep_output(ctx: Any, input: Any) -> Any:
    """Returns a list nested ``input["depth"]`` levels deep."""
    value: Any = []
    for _ in range(int(input["depth"])):
        value = [value]
    return value

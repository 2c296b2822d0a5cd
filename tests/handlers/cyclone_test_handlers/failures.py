"""Handlers for the failure-semantics tests (tests/integration/test_failure_rules.py)."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from cyclone_test_handlers import engine

_lock = threading.Lock()
_barriers: dict[str, threading.Barrier] = {}


def barrier(key: str) -> threading.Barrier:
    """The two-party barrier of ``key`` (created on first use): the handler and the test
    meet there, then race."""
    with _lock:
        return _barriers.setdefault(key, threading.Barrier(2))


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


def ledger_then_race(ctx: Any, input: Any) -> Any:
    """Write a ledger row through the completion transaction, set ``written``, meet the
    test at the barrier of ``key``, then return (``input["fail"]`` false) or raise: the
    completion (or the failed attempt) then races whatever the test does after the
    barrier."""
    engine.write_ledger(ctx, input["schema"], "race")
    engine.event(input["key"], "written").set()
    barrier(input["key"]).wait(timeout=20)
    if input.get("fail"):
        raise RuntimeError("failing attempt racing a cancel")
    return {"ok": True}


def huge_error(ctx: Any, input: Any) -> Any:
    """Raise a ``ValueError`` whose message is 100,000 characters, caused by a chain of 60
    exceptions raised 60 calls deep (a traceback far longer than what is kept)."""

    def down(n: int) -> None:
        if n == 0:
            raise KeyError("bottom")
        try:
            down(n - 1)
        except LookupError as exc:
            raise IndexError(f"level {n}") from exc

    try:
        down(60)
    except LookupError as exc:
        raise ValueError("E" * 100_000) from exc
    return None


def raise_when_cancelled(ctx: Any, input: Any) -> Any:
    """Wait (up to 20 s) until told to stop, then raise, as cooperative code does."""
    ctx.wait_cancelled(20)
    raise RuntimeError("gave up: cancelled")

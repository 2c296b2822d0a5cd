"""Handlers for the node-type tests (fan-out, child, wait_signal)."""

from __future__ import annotations

from typing import Any

from cyclone_flow import PermanentError


def numbers(ctx: Any, input: Any) -> Any:
    """``{"n": N}`` -> ``{"items": [0, 1, ..., N-1]}``."""
    return {"items": list(range(int(input["n"])))}


def square(ctx: Any, input: Any) -> Any:
    """A fan-out item: ``x`` -> ``x * x`` (a cheap no-op-like item handler)."""
    return input * input


def item_info(ctx: Any, input: Any) -> Any:
    """A fan-out item that reports what it saw: its input, node and item index."""
    return {"input": input, "node": ctx.node, "index": ctx.item_index}


def fail_on(ctx: Any, input: Any) -> Any:
    """``{"value": v, "bad": b}``: raises PermanentError when ``v == b``, else returns v."""
    if input["value"] == input["bad"]:
        raise PermanentError(f"item {input['value']} is bad")
    return input["value"]


def wait_cancelled(ctx: Any, input: Any) -> Any:
    """Runs until cancelled, or ``input["seconds"]`` (default 30)."""
    seconds = float(input.get("seconds", 30)) if isinstance(input, dict) else 30.0
    return {"cancelled": ctx.wait_cancelled(seconds)}


_failed_once: set[tuple[str, Any]] = set()


def fail_first_time_on(ctx: Any, input: Any) -> Any:
    """Like :func:`fail_on`, but only the first call for the bad value of a run fails."""
    key = (ctx.run_id, input["value"])
    if input["value"] == input["bad"] and key not in _failed_once:
        _failed_once.add(key)
        raise PermanentError(f"item {input['value']} is bad this time")
    return input["value"]


def child_step(ctx: Any, input: Any) -> Any:
    """The last step of the test child flow: ``mode`` ok returns the input, fail raises
    PermanentError (``fail_once...``: only the first time that exact mode is seen), hang
    runs until cancelled."""
    if input["mode"] == "fail":
        raise PermanentError("the child failed on purpose")
    if input["mode"].startswith("fail_once") and input["mode"] not in _failed_once:
        _failed_once.add(input["mode"])
        raise PermanentError("the child failed on purpose, once")
    if input["mode"] == "hang":
        ctx.wait_cancelled(30)
    return input

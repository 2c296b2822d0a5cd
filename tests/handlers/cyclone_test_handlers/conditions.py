"""Handlers for the ``when:`` and rerun tests: each call is counted in process memory
by ``(run_id, node)``, so a test can tell which handlers ran (and which a rerun reused)."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from cyclone_test_handlers.engine import write_ledger

_lock = threading.Lock()
_calls: dict[tuple[str, str], int] = defaultdict(int)
_inputs: dict[tuple[str, str], list[Any]] = defaultdict(list)


def calls(run_id: str, node: str) -> int:
    """How many times a handler of this module was called for ``(run_id, node)``."""
    with _lock:
        return _calls[(run_id, node)]


def inputs(run_id: str, node: str) -> list[Any]:
    """The inputs the handler of ``(run_id, node)`` was called with, in order."""
    with _lock:
        return list(_inputs[(run_id, node)])


def _count(ctx: Any, input: Any) -> None:
    with _lock:
        _calls[(ctx.run_id, ctx.node)] += 1
        _inputs[(ctx.run_id, ctx.node)].append(input)


def echo(ctx: Any, input: Any) -> Any:
    """Count the call; return ``{"node", "input"}``."""
    _count(ctx, input)
    return {"node": ctx.node, "input": input}


def value(ctx: Any, input: Any) -> Any:
    """Count the call; return the input unchanged."""
    _count(ctx, input)
    return input


def upstream(ctx: Any, input: Any) -> Any:
    """Count the call; return what ``ctx.upstream`` gives for each name of
    ``input["names"]``."""
    _count(ctx, input)
    return {name: ctx.upstream(name) for name in input["names"]}


def ledger(ctx: Any, input: Any) -> Any:
    """Count the call and write a ledger row (``input["schema"]``) through the completion
    transaction; return ``{"node"}``."""
    _count(ctx, input)
    write_ledger(ctx, input["schema"], "done")
    return {"node": ctx.node}

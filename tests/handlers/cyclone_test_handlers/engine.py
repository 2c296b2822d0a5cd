"""Handlers for the engine correctness tests (tests/integration, tests/chaos).

Every business write goes through ``ctx.completion_tx()`` into ``<schema>.ledger`` (see
``tests/helpers/rows.py``), so a row exists only if the step's completion
committed. In-process tests coordinate with handlers through the registries below, keyed
by a test-chosen ``key`` (or the run id), so tests never share state.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from typing import Any

from psycopg import sql

_lock = threading.Lock()
_events: dict[tuple[str, str], threading.Event] = {}
_barriers: dict[str, threading.Barrier] = {}
_calls: dict[str, int] = defaultdict(int)
_observed: dict[str, list[dict[str, Any]]] = defaultdict(list)
_executions: dict[tuple[str, str], int] = defaultdict(int)


def event(key: str, name: str) -> threading.Event:
    """The event ``name`` of ``key`` (created on first use)."""
    with _lock:
        return _events.setdefault((key, name), threading.Event())


def observed(key: str) -> list[dict[str, Any]]:
    """What the handlers of ``key`` recorded when they returned (a copy)."""
    with _lock:
        return [dict(o) for o in _observed[key]]


def executions(run_id: str, node: str) -> int:
    """How many times a counting handler was called for ``(run_id, node)`` in this process."""
    with _lock:
        return _executions[(run_id, node)]


def _next_call(key: str) -> int:
    with _lock:
        _calls[key] += 1
        return _calls[key]


def _record(key: str, **info: Any) -> None:
    with _lock:
        _observed[key].append(info)


def write_ledger(ctx: Any, schema: str, tag: str) -> None:
    """One ledger row for this step, inside the step's completion transaction."""
    ctx.completion_tx().execute(
        sql.SQL("INSERT INTO {}.ledger (run_id, node, tag, pid) VALUES (%s, %s, %s, %s)").format(
            sql.Identifier(schema)
        ),
        (ctx.run_id, ctx.node, tag, os.getpid()),
    )


def ledger(ctx: Any, input: Any) -> Any:
    """Write a ledger row, then optionally sleep ``input["sleep"]`` seconds."""
    write_ledger(ctx, input["schema"], f"attempt{ctx.attempt}")
    if input.get("sleep"):
        time.sleep(float(input["sleep"]))
    return {"node": ctx.node, "pid": os.getpid()}


def crash_once(ctx: Any, input: Any) -> Any:
    """Write a ledger row; the first call (no marker file yet) then creates the marker and
    sleeps ``input["sleep"]`` seconds so the test can SIGKILL its process before the
    commit. Later calls return at once."""
    write_ledger(ctx, input["schema"], f"pid{os.getpid()}")
    marker = input["marker"]
    if not os.path.exists(marker):
        with open(marker, "w", encoding="utf-8") as fh:
            fh.write(str(os.getpid()))
        time.sleep(float(input.get("sleep", 60)))
    return {"pid": os.getpid(), "attempt": ctx.attempt}


def gate(ctx: Any, input: Any) -> Any:
    """Write a ledger row tagged ``call<n>``; the first call sets ``entered`` and blocks
    (ignoring cancellation) until the test sets ``release``."""
    key = input["key"]
    n = _next_call(key)
    write_ledger(ctx, input["schema"], f"call{n}")
    released = True
    if n == 1:
        event(key, "entered").set()
        released = event(key, "release").wait(float(input.get("max_wait", 30)))
    _record(key, call=n, released=released, cancelled=ctx.cancelled())
    return {"call": n}


def until_cancelled(ctx: Any, input: Any) -> Any:
    """Write a ledger row tagged ``call<n>``; calls listed in ``block_calls`` (default
    ``[1]``) set ``entered`` and block until ``ctx.cancelled()`` (or ``max_wait``)."""
    key = input["key"]
    n = _next_call(key)
    write_ledger(ctx, input["schema"], f"call{n}")
    got = ctx.cancelled()
    if n in input.get("block_calls", [1]):
        event(key, "entered").set()
        got = ctx.wait_cancelled(float(input.get("max_wait", 20)))
    _record(key, call=n, cancelled=got)
    return {"call": n, "cancelled": got}


def fail_after_entered(ctx: Any, input: Any) -> Any:
    """Wait until the sibling of ``key`` is inside its handler, then raise."""
    if not event(input["key"], "entered").wait(10):
        raise TimeoutError("sibling never started")
    raise RuntimeError("sibling failure")


def write_then_raise(ctx: Any, input: Any) -> Any:
    """Write a ledger row through the completion transaction, then raise."""
    write_ledger(ctx, input["schema"], "doomed")
    raise ValueError("after business write")


def sleepy(ctx: Any, input: Any) -> Any:
    """Run for ``input["seconds"]`` unless cancelled first."""
    cancelled = ctx.wait_cancelled(float(input["seconds"]))
    return {"cancelled": cancelled}


def fanin_branch(ctx: Any, input: Any) -> Any:
    """Write a ledger row, then meet the other branch of this run at a barrier, so both
    return (and both completion transactions commit) together."""
    write_ledger(ctx, input["schema"], "branch")
    with _lock:
        barrier = _barriers.setdefault(ctx.run_id, threading.Barrier(2))
    barrier.wait(timeout=10)
    return {"node": ctx.node}


def count_exec(ctx: Any, input: Any) -> Any:
    """Count this call (in process memory) and write a ledger row."""
    with _lock:
        _executions[(ctx.run_id, ctx.node)] += 1
    write_ledger(ctx, input["schema"], "join")
    return {"node": ctx.node}


def exit_once(ctx: Any, input: Any) -> Any:
    """The first call of ``key`` raises ``SystemExit`` (as a library calling
    ``sys.exit()`` would); later calls return."""
    n = _next_call(input["key"])
    if n == 1:
        raise SystemExit(3)
    return {"call": n}

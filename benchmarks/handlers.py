"""Handlers called by the benchmark flows (``benchmarks/flows/*.yaml``); a worker runs them
with ``allow_modules=["benchmarks.handlers"]``."""

from __future__ import annotations

from typing import Any

from benchmarks.sql import qualified
from cyclone_flow.flowfile.model import JSON


def noop(ctx: Any, input: JSON) -> JSON:
    """Do nothing; output ``null``."""
    return None


async def noop_async(ctx: Any, input: JSON) -> JSON:
    """Do nothing in an ``async def`` handler (run on the worker's event loop); output
    ``null``."""
    return None


def echo(ctx: Any, input: JSON) -> JSON:
    """Return the input unchanged (the chain passes ``{"v": n}`` along)."""
    return input


def produce_items(ctx: Any, input: JSON) -> JSON:
    """Return ``list(range(input["items"]))``: the list a fan-out runs over."""
    assert isinstance(input, dict)
    count = input["items"]
    assert isinstance(count, int)
    return list(range(count))


def write_row(ctx: Any, input: JSON) -> JSON:
    """Write one row into ``<input.schema>.bench_ledger`` through ``ctx.completion_tx()``:
    it commits with the step's completion (the exactly-once path)."""
    assert isinstance(input, dict)
    schema = input["schema"]
    assert isinstance(schema, str)
    ctx.completion_tx().execute(
        qualified(schema)["bench_ledger_insert"],
        {"run_id": ctx.run_id, "node": ctx.node, "amount": input.get("amount", 1)},
    )
    return {"ok": True}


def log_lines(ctx: Any, input: JSON) -> JSON:
    """Print ``input["lines"]`` short lines (a chatty handler: the step-log benchmark)."""
    assert isinstance(input, dict)
    count = input["lines"]
    assert isinstance(count, int)
    for i in range(count):
        print(f"line {i:04d} of a chatty handler")
    return None

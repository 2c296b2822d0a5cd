"""The exactly-once path: a handler that writes one business row through
``ctx.completion_tx()`` (``flows/exactly_once.yaml``), so each step commits its row with
its completion. Steps/s with 8 workers from a backlog of 20,000 (``--quick``: 100); the
row count is checked."""

from __future__ import annotations

import psycopg

from benchmarks.common import Env, Result, load, pick
from benchmarks.engine import measure
from benchmarks.sql import qualified

WORKERS = 8


def run(env: Env, *, quick: bool) -> list[Result]:
    """One result: steps/s; its ratio to the ``1/tx`` ceiling is the target's figure."""
    runs = pick((20_000, 100), quick)

    def setup(schema: str) -> None:
        with psycopg.connect(env.url, autocommit=True) as conn:
            conn.execute(qualified(schema)["bench_ledger_create"])

    def check(schema: str) -> None:
        with psycopg.connect(env.url, autocommit=True) as conn:
            row = conn.execute(qualified(schema)["bench_ledger_count"]).fetchone()
        if row is None or row[0] != runs:
            raise RuntimeError(f"exactly-once: {row and row[0]} ledger rows for {runs} steps")

    result, _ = measure(
        env,
        name="exactly-once steps",
        prefix="bench_once",
        flow=load("exactly_once"),
        inputs=lambda schema: ({"schema": schema, "amount": i} for i in range(runs)),
        runs=runs,
        steps_per_run=1,
        workers=WORKERS,
        setup=setup,
        check=check,
    )
    return [result]

"""What step logs cost (issue 30.4): no-op steps with the capture on (the default) and off
(``step_log_bytes=0``), and steps that print 1,000 lines each, with 4 workers from a
backlog. ``commits_per_step`` shows the statements: a no-op step must cost none more
with the capture on; a chatty step's lines go in a few multi-row INSERTs (a commit each),
not one per line. Rows and log INSERT statements per step are counted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg

from benchmarks.common import Env, Result, load, pick
from benchmarks.engine import measure
from cyclone_flow.flowfile.model import JSON

WORKERS = 4
LINES = 1_000


def _per_step(env: Env, schema: str, steps: int) -> tuple[float, float]:
    """Log rows and log INSERT statements per step (the rows of one statement share their
    transaction, so their ``xmin``)."""
    with psycopg.connect(env.url) as conn:
        row = conn.execute(
            f'SELECT count(*), count(DISTINCT xmin::text) FROM "{schema}".cyclone_step_logs'
        ).fetchone()
    rows, inserts = row if row else (0, 0)
    return rows / max(steps, 1), inserts / max(steps, 1)


def run(env: Env, *, quick: bool, workers: int = WORKERS) -> list[Result]:
    """Three results: no-op with the capture on and off, and 1,000 printed lines a step."""
    noop_runs = pick((3_000, 100), quick)
    chatty_runs = pick((300, 20), quick)
    results: list[Result] = []
    cases: list[tuple[str, str, int, dict[str, Any], dict[str, JSON]]] = [
        ("no-op steps, step logs on", "noop", noop_runs, {}, {}),
        ("no-op steps, step logs off", "noop", noop_runs, {"step_log_bytes": 0}, {}),
        (f"{LINES:,} log lines per step", "log_lines", chatty_runs, {}, {"lines": LINES}),
    ]
    for name, flow_name, runs, options, run_input in cases:
        rows: dict[str, float] = {}

        def check(schema: str, runs: int = runs, rows: dict[str, float] = rows) -> None:
            rows["per_step"], rows["inserts"] = _per_step(env, schema, runs)

        def inputs(
            _schema: str, n: int = runs, given: dict[str, JSON] = run_input
        ) -> Iterator[JSON]:
            return ({**given, "i": i} for i in range(n))

        result, _ = measure(
            env,
            name=name,
            prefix="bench_step_logs",
            flow=load(flow_name),
            inputs=inputs,
            runs=runs,
            steps_per_run=1,
            workers=workers,
            options=options,
            check=check,
        )
        result.extra["log_rows_per_step"] = round(rows.get("per_step", 0.0), 1)
        result.extra["log_inserts_per_step"] = round(rows.get("inserts", 0.0), 2)
        result.note = (
            f"{result.extra['log_rows_per_step']:g} log rows in "
            f"{result.extra['log_inserts_per_step']:g} INSERTs, "
            f"{result.extra.get('commits_per_step')} commits, "
            f"py {result.extra.get('worker_cpu_ms_per_step')} ms CPU /step"
        )
        results.append(result)
    return results

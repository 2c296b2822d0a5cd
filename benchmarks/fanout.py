"""A fan-out of 10,000 items (``--quick``: 100) with ``max_parallel: 50``
(``flows/fanout.yaml``, the YAML of DESIGN.md): wall time of the one run, from its first
claim to its finish, with 8 workers."""

from __future__ import annotations

from benchmarks.common import Env, Result, load, pick
from benchmarks.engine import measure

WORKERS = 8


def run(env: Env, *, quick: bool) -> list[Result]:
    """One result: seconds (``extra.steps_per_s``: item steps and the rest per second)."""
    items = pick((10_000, 100), quick)
    result, _ = measure(
        env,
        name=f"fan-out {items:,} items",
        prefix="bench_fanout",
        flow=load("fanout"),
        inputs=lambda _schema: [{"items": items}],
        runs=1,
        steps_per_run=None,
        workers=WORKERS,
        per="runs",
    )
    result.value = result.extra["span_s"]
    result.unit = "s"
    result.extra["items_per_s"] = round(items / result.extra["span_s"], 1)
    return [result]

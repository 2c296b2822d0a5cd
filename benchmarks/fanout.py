"""A fan-out of 10,000 items (``--quick``: 100) with ``max_parallel: 50``
(``flows/fanout.yaml``, the YAML of DESIGN.md): wall time of the one run, from its first
claim to its finish, with 8 workers. Reports "skipped" when this engine build's submit
refuses ``type: fan_out`` (UnsupportedNodeTypeError)."""

from __future__ import annotations

from benchmarks.common import Env, Result, load, pick
from benchmarks.engine import measure
from cyclone_flow.errors import UnsupportedNodeTypeError

WORKERS = 8
SKIPPED = "skipped: fan_out not supported by this engine build"


def run(env: Env, *, quick: bool) -> list[Result]:
    """One result: seconds (``extra.steps_per_s``: item steps and the rest per second)."""
    items = pick((10_000, 100), quick)
    try:
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
    except UnsupportedNodeTypeError:
        return [Result(f"fan-out {items:,} items", WORKERS, None, "s", note=SKIPPED)]
    result.value = result.extra["span_s"]
    result.unit = "s"
    result.extra["items_per_s"] = round(items / result.extra["span_s"], 1)
    return [result]

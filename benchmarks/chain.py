"""A 3-node chain ``a -> b -> c`` (``flows/chain.yaml``; each node reads its upstream's
output): runs/s with 8 workers from a backlog of 5,000 (``--quick``: 20) runs."""

from __future__ import annotations

from benchmarks.common import Env, Result, load, pick
from benchmarks.engine import measure

WORKERS = 8


def run(env: Env, *, quick: bool) -> list[Result]:
    """One result: runs/s (``extra.steps_per_s`` is three times that, give or take)."""
    runs = pick((5_000, 20), quick)
    result, _ = measure(
        env,
        name="3-node chain",
        prefix="bench_chain",
        flow=load("chain"),
        inputs=lambda _schema: ({"i": i} for i in range(runs)),
        runs=runs,
        steps_per_run=3,
        workers=WORKERS,
        per="runs",
    )
    return [result]

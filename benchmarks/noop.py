"""No-op single-step runs: steps/s with 1, 4 and 8 workers from a backlog of 20,000
(``--quick``: 100) runs of ``flows/noop.yaml``, submitted before the worker starts."""

from __future__ import annotations

from benchmarks.common import Env, Result, load, pick
from benchmarks.engine import measure

WORKERS = (1, 4, 8)


def run(env: Env, *, quick: bool, workers: tuple[int, ...] = WORKERS) -> list[Result]:
    """One result per worker count."""
    runs = pick((20_000, 100), quick)
    flow = load("noop")
    results = []
    for n in workers:
        result, _ = measure(
            env,
            name="no-op steps",
            prefix="bench_noop",
            flow=flow,
            inputs=lambda _schema: ({"i": i} for i in range(runs)),
            runs=runs,
            steps_per_run=1,
            workers=n,
        )
        results.append(result)
    return results

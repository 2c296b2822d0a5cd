"""No-op single-step runs: steps/s with 1, 4 and 8 workers from a backlog of 20,000
(``--quick``: 100) runs of ``flows/noop.yaml``, submitted before the worker starts; with
``processes`` above 1 also with that many worker processes of each worker count at once
(``cyclone-flow worker --processes N``), named ``no-op, N processes``."""

from __future__ import annotations

from benchmarks.common import Env, Result, load, pick
from benchmarks.engine import measure

WORKERS = (1, 4, 8)


def run(
    env: Env,
    *,
    quick: bool,
    workers: tuple[int, ...] = WORKERS,
    processes: tuple[int, ...] = (1,),
) -> list[Result]:
    """One result per (process count, worker count); ``workers`` is per process."""
    runs = pick((20_000, 100), quick)
    flow = load("noop")
    results = []
    for p in processes:
        for n in workers:
            result, _ = measure(
                env,
                name="no-op steps" if p == 1 else f"no-op, {p} processes",
                prefix="bench_noop",
                flow=flow,
                inputs=lambda _schema: ({"i": i} for i in range(runs)),
                runs=runs,
                steps_per_run=1,
                workers=n,
                processes=p,
            )
            if p > 1:
                result.note = f"{p} processes x {n} workers"
            results.append(result)
    return results

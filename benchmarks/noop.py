"""No-op single-step runs: steps/s with 1, 4 and 8 workers from a backlog of 20,000
(``--quick``: 100) runs of ``flows/noop.yaml``, submitted before the worker starts; with
``processes`` above 1 also with that many worker processes of each worker count at once
(``cyclone-flow worker --processes N``), named ``no-op, N processes``.

:func:`run_async`: the same backlog of ``flows/noop_async.yaml``, whose handler is an
``async def`` no-op (issue 30.6: the claiming worker thread waits while the worker's event
loop thread runs the coroutine), named ``no-op async steps``: its difference to ``no-op
steps`` is the cost of the hop to the loop and back."""

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


def run_async(env: Env, *, quick: bool, workers: tuple[int, ...] = WORKERS) -> list[Result]:
    """One result per worker count: no-op steps of an ``async def`` handler."""
    runs = pick((20_000, 100), quick)
    flow = load("noop_async")
    results = []
    for n in workers:
        result, _ = measure(
            env,
            name="no-op async steps",
            prefix="bench_noop_async",
            flow=flow,
            inputs=lambda _schema: ({"i": i} for i in range(runs)),
            runs=runs,
            steps_per_run=1,
            workers=n,
        )
        results.append(result)
    return results

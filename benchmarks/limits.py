"""Flow control (issue 20, docs/flow-control.md): no-op steps/s from one backlog of
20,000 (``--quick``: 100) single-step runs at 8 workers (``--quick``: 2), four times in
one suite run: without a limit (``flows/noop.yaml``), under a global concurrency limit
of 40, with 1,000 keys at limit 1 (the runs' keys round robin), and under a rate limit
far above the achievable rate. Each limited figure is also given as a ratio to the
unlimited one of the same run (``extra["vs_unlimited"]``): the cost of the limit. The
targets: a limit that does not bind costs at most 15 %, the global limit of 40 at most
25 %."""

from __future__ import annotations

from benchmarks.common import Env, Result, load, pick
from benchmarks.engine import measure

KEYS = 1000
CASES = (
    ("no-op, no limit", "noop"),
    ("no-op, global limit 40", "limits_global"),
    (f"no-op, {KEYS:,} keys at limit 1", "limits_keys"),
    ("no-op, rate limit above the rate", "limits_rate"),
)


def run(env: Env, *, quick: bool, workers: int | None = None) -> list[Result]:
    """One result per case, in :data:`CASES` order, the limited ones with their ratio to
    the unlimited figure."""
    runs = pick((20_000, 100), quick)
    n = workers or (2 if quick else 8)
    results: list[Result] = []
    for name, flow_name in CASES:
        result, _ = measure(
            env,
            name=name,
            prefix="bench_limits",
            flow=load(flow_name),
            inputs=lambda _schema: ({"i": i, "k": i % KEYS} for i in range(runs)),
            runs=runs,
            steps_per_run=1,
            workers=n,
        )
        results.append(result)
    base = results[0].value or 0.0
    for r in results[1:]:
        if base and r.value:
            share = r.value / base
            r.extra["vs_unlimited"] = round(share, 3)
            r.note = f"{share:.1%} of the unlimited figure"
    return results

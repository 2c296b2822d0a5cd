"""Flow control (issue 20, docs/flow-control.md): no-op steps/s from one backlog of
20,000 (``--quick``: 100) single-step runs at 8 workers (``--quick``: 2), four cases:
without a limit (``flows/noop.yaml``), under a global concurrency limit of 40, with 1,000
keys at limit 1 (the runs' keys round robin), and under a rate limit far above the
achievable rate. The cases run in ``rounds`` rounds (3; ``--quick``: 1), each round in
another order (rotated), so that a slow spell of the machine does not fall on one case
only. A figure is the median of its rounds; each limited figure's cost is the median of
its per-round ratios to the unlimited figure of the same round (``extra["vs_unlimited"]``,
the rounds' figures and ratios beside it). The targets: a limit that does not bind costs
at most 15 %, the global limit of 40 at most 25 %."""

from __future__ import annotations

import statistics

from benchmarks.common import Env, Result, load, pick
from benchmarks.engine import measure

KEYS = 1000
CASES = (
    ("no-op, no limit", "noop"),
    ("no-op, global limit 40", "limits_global"),
    (f"no-op, {KEYS:,} keys at limit 1", "limits_keys"),
    ("no-op, rate limit above the rate", "limits_rate"),
)


def run(
    env: Env, *, quick: bool, workers: int | None = None, rounds: int | None = None
) -> list[Result]:
    """One result per case, in :data:`CASES` order, the limited ones with their ratio to
    the unlimited figure (medians over ``rounds`` rounds in rotated order)."""
    runs = pick((20_000, 100), quick)
    n = workers or (2 if quick else 8)
    count = rounds or (1 if quick else 3)
    figures: dict[str, list[Result]] = {name: [] for name, _ in CASES}
    for r in range(count):
        order = CASES[r % len(CASES) :] + CASES[: r % len(CASES)]
        for name, flow_name in order:
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
            figures[name].append(result)
    base_name = CASES[0][0]
    bases = [b.value or 0.0 for b in figures[base_name]]
    results: list[Result] = []
    for name, _ in CASES:
        rows = figures[name]
        values = [row.value or 0.0 for row in rows]
        middle = sorted(rows, key=lambda row: row.value or 0.0)[len(rows) // 2]
        result = Result(
            name,
            n,
            round(statistics.median(values), 1),
            middle.unit,
            peak_rss_mib=max(row.peak_rss_mib or 0.0 for row in rows),
            extra={**middle.extra, "rounds": values},
        )
        if name != base_name:
            ratios = [v / b for v, b in zip(values, bases, strict=True) if b and v]
            if ratios:
                share = statistics.median(ratios)
                result.extra["vs_unlimited"] = round(share, 3)
                result.extra["vs_unlimited_rounds"] = [round(x, 3) for x in ratios]
                spread = f" [{min(ratios):.0%}-{max(ratios):.0%}]" if len(ratios) > 1 else ""
                result.note = f"{share:.1%} of the unlimited figure{spread}"
        elif len(values) > 1:
            result.note = f"rounds {min(values):,.0f}-{max(values):,.0f}"
        results.append(result)
    return results

"""Memory soak: one worker (8 threads) runs 100,000 no-op steps (``--soak-steps``; quick:
2,000); its RSS is sampled every second. Reports the RSS after warm-up (the first sample
once 5% of the steps completed) and at the end, and their difference."""

from __future__ import annotations

from benchmarks.common import Env, Result, load
from benchmarks.engine import measure

WORKERS = 8
STEPS = 100_000
FLAT_MIB = 10.0  # growth from warm-up to the end under which RSS counts as flat


def run(env: Env, *, quick: bool, steps: int | None = None) -> list[Result]:
    """One result: RSS growth in MiB from warm-up to the end (``extra`` has the samples)."""
    runs = steps or (2_000 if quick else STEPS)
    result, report = measure(
        env,
        name=f"soak {runs:,} no-op steps",
        prefix="bench_soak",
        flow=load("noop"),
        inputs=lambda _schema: ({"i": i} for i in range(runs)),
        runs=runs,
        steps_per_run=1,
        workers=WORKERS,
        rss_every_s=1.0,
        timeout_s=3600.0,
    )
    mib = 1024 * 1024
    samples = report.rss_samples
    warm = next((s for s in samples if s[1] <= runs * 0.95), samples[0])
    first, end = samples[0], samples[-1]
    growth = (end[2] - warm[2]) / mib
    result.extra.update(
        {
            "rss_first_mib": round(first[2] / mib, 1),
            "rss_start_mib": round(warm[2] / mib, 1),
            "rss_end_mib": round(end[2] / mib, 1),
            "rss_samples": [(t, left, round(rss / mib, 1)) for t, left, rss in samples],
            "throughput_steps_per_s": result.value,
        }
    )
    result.value = round(growth, 1)
    result.unit = "MiB"
    result.note = (
        f"RSS start {warm[2] / mib:.1f} MiB (after 5% of the steps), end {end[2] / mib:.1f} "
        f"MiB: {'flat' if growth < FLAT_MIB else 'GROWS'}"
    )
    return [result]

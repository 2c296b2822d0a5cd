"""Health soak (issue 21): no-op runs submitted at a steady rate and worked by one
in-process worker while another session holds a REPEATABLE READ transaction open for the
middle half of the run (the analytics query that pins the xmin horizon). Every sample
prints the claim throughput, the backlog, the dead tuples of cyclone_steps and
cyclone_runs and the health advisor's warnings; at the end, when ``doctor`` first warned
and the throughput before, during and after the hold. Run once with the default storage
settings and once with the advisor's recommended autovacuum settings (docs/deployment.md).

    python -m benchmarks.health_soak --duration 20m            # the issue's soak
    python -m benchmarks.health_soak --duration 2m --rate 100  # a quick look

Without ``--database-url`` it starts an embedded Postgres (as ``python -m benchmarks``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import Env, database, load, schema_for  # noqa: E402
from benchmarks.sql import qualified  # noqa: E402
from cyclone_flow import Client  # noqa: E402
from cyclone_flow.advisor import Thresholds  # noqa: E402
from cyclone_flow.durations import parse_duration_arg  # noqa: E402

VARIANTS = ("default", "advised")
WORKERS = 8
CHUNK_EVERY_S = 0.1  # the producer submits rate * CHUNK_EVERY_S runs this often


@dataclass
class Sample:
    """One sample: seconds since the start, steps completed per second since the previous
    sample, claimable steps, dead tuples, whether the snapshot is held, the warnings."""

    t_s: float
    steps_per_s: float
    backlog: int
    dead_steps: int
    dead_runs: int
    holding: bool
    warnings: list[str] = field(default_factory=list)


@dataclass
class Variant:
    """One soak: its samples, when doctor first warned (seconds, None: never) and with
    what, and the mean throughput before, during and after the hold."""

    name: str
    samples: list[Sample]
    first_warning_s: float | None
    first_warnings: list[str]
    before: float
    during: float
    after: float


def _quiet_logger() -> logging.Logger:
    log = logging.getLogger("cyclone_flow.bench_health")
    log.setLevel(logging.WARNING)
    return log


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 1) if values else 0.0


def soak(env: Env, variant: str, duration_s: float, rate: float, sample_s: float) -> Variant:
    """One soak of ``duration_s`` seconds at ``rate`` runs per second."""
    flow = load("noop")
    with schema_for(env, f"bench_health_{variant}") as schema:
        q = qualified(schema)
        if variant == "advised":
            with psycopg.connect(env.url, autocommit=True) as conn:
                conn.execute(q["bench_health_advised_steps"])
                conn.execute(q["bench_health_advised_runs"])
        client = Client(
            env.url,
            schema=schema,
            workers=WORKERS,
            allow_modules=["benchmarks.handlers"],
            logger=_quiet_logger(),
        )
        stop = threading.Event()
        hold_from, hold_to = duration_s * 0.25, duration_s * 0.75
        start = time.monotonic()

        def produce() -> None:
            per_chunk = max(1, round(rate * CHUNK_EVERY_S))
            tick = start
            while not stop.is_set():
                client.submit_many(flow, [{"i": 0}] * per_chunk)
                tick += CHUNK_EVERY_S
                stop.wait(max(0.0, tick - time.monotonic()))

        def hold() -> None:
            if stop.wait(hold_from):
                return
            with psycopg.connect(env.url, application_name="analytics-soak") as conn:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                conn.execute(q["bench_health_hold_snapshot"])
                stop.wait(max(0.0, hold_to - (time.monotonic() - start)))
                conn.rollback()

        producer = threading.Thread(target=produce, daemon=True)
        holder = threading.Thread(target=hold, daemon=True)
        client.start()
        producer.start()
        holder.start()
        samples: list[Sample] = []
        first_warning: float | None = None
        first: list[str] = []
        done_before = 0
        last = start
        thresholds = Thresholds(xact_age_s=60.0)
        try:
            with psycopg.connect(env.url, autocommit=True) as conn:
                while (now := time.monotonic()) - start < duration_s:
                    time.sleep(max(0.0, sample_s - (now - last)))
                    row = conn.execute(q["bench_health_completed"]).fetchone()
                    done = int(row[0]) if row else 0
                    at = time.monotonic()
                    report = client.health(thresholds)
                    tables = {t.table_name: t for t in report.tables}
                    warnings = sorted({a.check for a in report.advice})
                    t_s = at - start
                    if warnings and first_warning is None:
                        first_warning = t_s
                        first = [a.text() for a in report.advice]
                    samples.append(
                        Sample(
                            t_s=round(t_s, 1),
                            steps_per_s=round((done - done_before) / max(at - last, 1e-9), 1),
                            backlog=sum(s.available for s in report.queues),
                            dead_steps=tables["cyclone_steps"].dead,
                            dead_runs=tables["cyclone_runs"].dead,
                            holding=hold_from <= t_s < hold_to,
                            warnings=warnings,
                        )
                    )
                    print(_line(variant, samples[-1]), flush=True)
                    done_before, last = done, at
        finally:
            stop.set()
            producer.join(10)
            holder.join(10)
            client.shutdown(timeout=10)
    return Variant(
        name=variant,
        samples=samples,
        first_warning_s=None if first_warning is None else round(first_warning, 1),
        first_warnings=first,
        before=_mean([s.steps_per_s for s in samples if s.t_s < hold_from]),
        during=_mean([s.steps_per_s for s in samples if s.holding]),
        after=_mean([s.steps_per_s for s in samples if s.t_s >= hold_to]),
    )


def _line(variant: str, s: Sample) -> str:
    held = "HOLD" if s.holding else "    "
    return (
        f"{variant:8} t={s.t_s:7.1f}s {held} {s.steps_per_s:8.1f} steps/s backlog={s.backlog:6} "
        f"dead steps={s.dead_steps:8} runs={s.dead_runs:8} warnings={','.join(s.warnings) or '-'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.health_soak")
    parser.add_argument("--duration", default="20m", help="length of each soak (default 20m)")
    parser.add_argument("--rate", type=float, default=200.0, help="runs submitted per second")
    parser.add_argument("--samples", type=int, default=40, help="samples per soak")
    parser.add_argument("--variant", choices=(*VARIANTS, "both"), default="both")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--json", action="store_true", help="print one JSON document at the end")
    args = parser.parse_args(argv)
    duration_s = parse_duration_arg(args.duration, max_s=86_400.0)
    variants = VARIANTS if args.variant == "both" else (args.variant,)
    results = []
    with database(args.database_url) as env:
        for variant in variants:
            results.append(
                soak(env, variant, duration_s, args.rate, duration_s / max(args.samples, 1))
            )
    for v in results:
        peak = max((s.dead_steps for s in v.samples), default=0)
        print(
            f"{v.name}: throughput before {v.before} / during the hold {v.during} / after "
            f"{v.after} steps/s; peak dead steps {peak}; doctor first warned at "
            f"{v.first_warning_s}s: {v.first_warnings[:3]}"
        )
    if args.json:
        doc: dict[str, Any] = {"variants": [asdict(v) for v in results]}
        print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Enqueue-to-claim latency on an idle queue (Engine Design: LISTEN/NOTIFY and the Polling
Floor: "In the common case, enqueue-to-claim latency is sub-millisecond").

What is measured
----------------
One sample is one single-node run submitted to an idle ``default`` queue served by one
worker client (one worker thread) in a separate process. Three clock readings, all
``CLOCK_MONOTONIC``, which Linux keeps system-wide so readings of the two processes compare
directly: ``t_call`` just before the producer calls ``Client.submit()``, ``t_return`` just
after it returns, and ``t_start`` on the first line of the handler in the worker process.

- ``claim_ms = t_start - t_return`` is the enqueue-to-claim latency: when ``submit()``
  returns, the run is committed and its wakeup published; what follows is the NOTIFY
  delivery to the worker's listener, the wake of its claim loop, the claim transaction
  (SKIP LOCKED + CAS, committed) and the hand-off of the claimed step to a worker thread
  that resolves the input and calls the handler.
- ``e2e_ms = t_start - t_call`` adds the whole ``submit()``: input validation, the submit
  transaction (definition upsert, run, step, commit) and the publication.
- ``submit_ms = t_return - t_call``.
- ``db_ms = cyclone_steps.started_at - cyclone_runs.created_at``: the database's own view;
  both are transaction start times (``now()``), so it runs from the start of the submit
  transaction to the start of the claim transaction.

The producer then waits for the run to finish (``Client.wait``) and pauses 2-10 ms, so
every submission meets an idle worker, before the next sample.

Modes: ``notify`` (defaults: the worker LISTENs), ``poll`` (``notify=False``: the worker
claims on its poll ticks only; poll_interval defaults (0.1 s, 1 s)), ``coalesce``
(``notify_coalesce=0.001`` on both clients; an idle publisher publishes inline, so this
should match ``notify``).

Run: ``.venv/bin/python -m benchmarks.latency [--json] [--database-url URL]
[--samples N] [--modes notify,poll,coalesce]``; without a URL an embedded Postgres
(pgserver) runs in a temporary folder. :func:`run` is the entry point for other tooling.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from cyclone_flow import Client, migrate
from cyclone_flow.flowfile import load_flow_text

MODES: dict[str, dict[str, dict[str, Any]]] = {
    "notify": {"worker": {}, "producer": {}},
    "poll": {"worker": {"notify": False}, "producer": {}},
    "coalesce": {
        "worker": {"notify_coalesce": 0.001},
        "producer": {"notify_coalesce": 0.001},
    },
}
DEFAULT_MODES = ("notify", "poll", "coalesce")
WARMUP = 20

FLOW = """
name: latency-probe
nodes:
  probe:
    call: benchmarks.latency:probe
    input: {}
"""


def _now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def probe(ctx: Any, input: Any) -> Any:
    """The benchmark's handler: returns the system-wide monotonic clock (ns) read on entry."""
    return {"t_ns": _now_ns()}


def _serve(url: str, schema: str, options: dict[str, Any], ready: Any, stop: Any) -> None:
    """Worker process: one worker thread on the default queue until ``stop`` is set."""
    client = Client(url, schema=schema, workers=1, allow_modules=["benchmarks"], **options)
    client.start()
    ready.set()
    stop.wait()
    client.shutdown(timeout=5)


def _percentiles(values: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {
        "p50": round(cuts[49], 3),
        "p95": round(cuts[94], 3),
        "p99": round(cuts[98], 3),
        "mean": round(statistics.fmean(values), 3),
        "max": round(max(values), 3),
    }


@contextmanager
def _fresh_schema(url: str, mode: str) -> Iterator[str]:
    schema = f"bench_{mode}_{uuid.uuid4().hex[:8]}"
    migrate(url, schema=schema)
    try:
        yield schema
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _measure(url: str, mode: str, samples: int, warmup: int) -> dict[str, Any]:
    spec = MODES[mode]
    flow = load_flow_text(FLOW)
    ctx = multiprocessing.get_context("spawn")
    rng = random.Random(5)
    with _fresh_schema(url, mode) as schema:
        ready, stop = ctx.Event(), ctx.Event()
        proc = ctx.Process(
            target=_serve, args=(url, schema, dict(spec["worker"]), ready, stop), daemon=True
        )
        proc.start()
        producer = Client(url, schema=schema, **spec["producer"])
        try:
            if not ready.wait(60):
                raise RuntimeError("the worker process did not start")
            claim: list[float] = []
            e2e: list[float] = []
            submit: list[float] = []
            db: list[float] = []
            for i in range(warmup + samples):
                time.sleep(rng.uniform(0.002, 0.010))
                t0 = _now_ns()
                run_id = producer.submit(flow)
                t1 = _now_ns()
                status = producer.wait(run_id, timeout=60)
                if status.state != "completed" or not isinstance(status.output, dict):
                    raise RuntimeError(f"run {run_id} ended {status.state}: {status.error}")
                if i < warmup:
                    continue
                t_start = status.output["probe"]["t_ns"]
                claim.append((t_start - t1) / 1e6)
                e2e.append((t_start - t0) / 1e6)
                submit.append((t1 - t0) / 1e6)
                step = producer.list_steps(run_id)[0]
                assert step.started_at is not None
                db.append((step.started_at - status.created_at).total_seconds() * 1e3)
        finally:
            producer.shutdown()
            stop.set()
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    return {
        "mode": mode,
        "options": spec,
        "samples": samples,
        "claim_ms": _percentiles(claim),
        "e2e_ms": _percentiles(e2e),
        "submit_ms": _percentiles(submit),
        "db_ms": _percentiles(db),
    }


def run(
    database_url: str,
    *,
    samples: int = 500,
    modes: tuple[str, ...] = DEFAULT_MODES,
    warmup: int = WARMUP,
) -> dict[str, Any]:
    """Measure enqueue-to-claim latency on ``database_url`` (each mode in a fresh schema,
    dropped afterwards); return ``{"benchmark", "definition", "environment", "modes":
    {mode: {"claim_ms"|"e2e_ms"|"submit_ms"|"db_ms": {"p50","p95","p99","mean","max"}}}}``
    in milliseconds (see the module docstring). ``samples`` (>= 2) are counted per mode
    after ``warmup`` unrecorded ones. Raises ValueError for an unknown mode or too few samples."""
    if samples < 2:
        raise ValueError("samples must be at least 2")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {unknown}; choose from {sorted(MODES)}")
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    load_before = os.getloadavg()[0]
    results = {m: _measure(database_url, m, samples, warmup) for m in modes}
    return {
        "benchmark": "enqueue_to_claim_latency",
        "definition": "claim_ms: submit() returned -> handler entered; e2e_ms: submit() "
        "called -> handler entered (CLOCK_MONOTONIC across processes); db_ms: "
        "steps.started_at - runs.created_at",
        "environment": {
            "python": platform.python_version(),
            "postgres": row[0] if row else "?",
            "cpus": os.cpu_count(),
            "loadavg_1m_before": round(load_before, 2),
            "loadavg_1m_after": round(os.getloadavg()[0], 2),
        },
        "modes": results,
    }


def _table(result: Mapping[str, Any]) -> str:
    head = (
        f"{'mode':<10} {'claim p50':>10} {'p95':>7} {'p99':>7} {'e2e p50':>9} {'p95':>7} "
        f"{'p99':>7} {'submit p50':>11} {'db p50':>7}"
    )
    lines = [head, "-" * len(head)]
    for mode, r in result["modes"].items():
        c, e = r["claim_ms"], r["e2e_ms"]
        lines.append(
            f"{mode:<10} {c['p50']:>10.2f} {c['p95']:>7.2f} {c['p99']:>7.2f} "
            f"{e['p50']:>9.2f} {e['p95']:>7.2f} {e['p99']:>7.2f} "
            f"{r['submit_ms']['p50']:>11.2f} {r['db_ms']['p50']:>7.2f}"
        )
    env = result["environment"]
    n = next(iter(result["modes"].values()))["samples"] if result["modes"] else 0
    lines.append(
        f"milliseconds; {n} samples per mode; Postgres {env['postgres']}, Python "
        f"{env['python']}, {env['cpus']} CPUs, 1-min load "
        f"{env['loadavg_1m_before']} before, {env['loadavg_1m_after']} after"
    )
    return "\n".join(lines)


@contextmanager
def _embedded() -> Iterator[str]:
    with warnings.catch_warnings():  # pgserver's noise about XDG_RUNTIME_DIR
        warnings.simplefilter("ignore")
        import pgserver

    with tempfile.TemporaryDirectory(prefix="cyclone-bench-pg-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(  # type: ignore[attr-defined]
            Path(tmp) / "pgdata", cleanup_mode="stop"
        )
        try:
            yield str(server.get_uri())
        finally:
            server.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Command line: print a table (or ``--json``) of the latency percentiles."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=__doc__)
    parser.add_argument("--database-url", help="Postgres URL (default: embedded, temporary)")
    parser.add_argument("--samples", type=int, default=500, help="samples per mode")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="unrecorded samples first")
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES), help="comma-separated")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if args.database_url:
        result = run(args.database_url, samples=args.samples, modes=modes, warmup=args.warmup)
    else:
        with _embedded() as url:
            result = run(url, samples=args.samples, modes=modes, warmup=args.warmup)
    print(json.dumps(result, indent=2) if args.json else _table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

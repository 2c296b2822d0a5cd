"""The producer path: bulk submission and one ``enqueue`` call.

- ``bulk enqueue``: ``Client.enqueue_many`` of no-op jobs (``chunk`` per transaction),
  jobs/s; ``bulk submit 3-node``: ``Client.submit_many`` of ``flows/chain.yaml``, runs/s.
  No worker runs: the figure is the write path alone.
- Their raw-SQL ceilings, in the same run: the same rows (runs, steps, deps: the columns
  the engine writes, copied from one run it wrote) written per chunk in one transaction,
  by multi-row ``INSERT ... SELECT FROM unnest(...)`` (``bulk ceiling unnest``) and by
  ``COPY ... FROM STDIN`` (``bulk ceiling COPY``); each engine figure also as a ratio to
  the faster of the two (``extra.ceiling_ratio``).
- ``enqueue call``: the latency of one ``Client.enqueue`` at idle (definition already
  stored), p50/p95 in ms.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from benchmarks.common import Env, Result, load, pick, schema_for
from benchmarks.sql import qualified
from cyclone_flow import Client
from cyclone_flow.flowfile.model import Flow
from cyclone_flow.options import job_flow

NOOP = "benchmarks.handlers:noop"
CHUNK = 1_000


def run(env: Env, *, quick: bool) -> list[Result]:
    """Bulk enqueue and bulk 3-node submit with their ceilings, then the enqueue call
    latency."""
    jobs = pick((10_000, 300), quick)
    runs = pick((5_000, 150), quick)
    chunk = CHUNK if not quick else 100
    out: list[Result] = []
    out.extend(_bulk(env, "bulk enqueue", "jobs/s", job_flow(NOOP), jobs, chunk, job=True))
    out.extend(_bulk(env, "bulk submit 3-node", "runs/s", load("chain"), runs, chunk, job=False))
    out.append(enqueue_latency(env, samples=pick((1_000, 30), quick)))
    return out


def _bulk(
    env: Env, name: str, unit: str, flow: Flow, count: int, chunk: int, *, job: bool
) -> list[Result]:
    """The engine's bulk write of ``count`` runs of ``flow``, then the two ceilings."""
    with schema_for(env, "bench_bulk") as schema:
        client = Client(env.url, schema=schema, workers=1)
        try:
            # the definition stored (and remembered) first, as on a live producer
            if job:
                client.enqueue_many(NOOP, [{"i": -1}])
            else:
                client.submit_many(flow, [{"i": -1}])
            t0 = time.perf_counter()
            if job:
                ids = client.enqueue_many(NOOP, ({"i": i} for i in range(count)), chunk_size=chunk)
            else:
                ids = client.submit_many(flow, ({"i": i} for i in range(count)), chunk_size=chunk)
            seconds = time.perf_counter() - t0
        finally:
            client.shutdown()
        assert len(ids) == count
        template = _template(env, schema, str(ids[0]))
    engine = Result(
        name, None, count / seconds, unit, extra={"runs": count, "chunk": chunk, "s": seconds}
    )
    ceilings = []
    for mode in ("unnest", "COPY"):
        with schema_for(env, "bench_bulk_ceiling") as schema:
            wid = _store_like(env, schema, template)
            secs = _ceiling(env, schema, wid, template, count, chunk, mode)
        ceilings.append(
            Result(
                f"bulk ceiling {mode} ({name.removeprefix('bulk ')})",
                None,
                count / secs,
                unit,
                extra={"runs": count, "chunk": chunk, "s": secs},
            )
        )
    best = max(c.value or 0.0 for c in ceilings)
    if best and engine.value:
        engine.extra["ceiling_ratio"] = round(engine.value / best, 3)
        engine.note = f"{engine.value / best:.0%} of the faster raw-SQL ceiling"
    return [engine, *ceilings]


# -- the raw-SQL ceiling ---------------------------------------------------------------------

RUN_COLS = ("workflow_id", "flow_name", "deadline", "output_limit", "max_signal_wait")
STEP_COLS = (
    "node", "type", "call", "state", "queue", "priority", "max_attempts", "backoff",
    "on_dep_failure", "timeout", "input",
)  # fmt: skip


def _template(env: Env, schema: str, run_id: str) -> dict[str, Any]:
    """The rows the engine wrote for run ``run_id``: its definition, run columns, steps
    and deps (the ceiling writes the same rows)."""
    q = qualified(schema)
    with psycopg.connect(env.url, autocommit=True) as conn:
        wf = conn.execute(q["bench_bulk_definition"], {"run_id": run_id}).fetchone()
        run = conn.execute(q["bench_bulk_run_row"], {"run_id": run_id}).fetchone()
        steps = conn.execute(q["bench_bulk_step_rows"], {"run_id": run_id}).fetchall()
        deps = conn.execute(q["bench_bulk_dep_rows"], {"run_id": run_id}).fetchall()
    assert wf is not None and run is not None
    return {"definition": wf, "run": run, "steps": steps, "deps": deps}


def _store_like(env: Env, schema: str, template: dict[str, Any]) -> int:
    q = qualified(schema)
    name, digest, definition, plan = template["definition"]
    with psycopg.connect(env.url, autocommit=True) as conn:
        row = conn.execute(
            q["bench_bulk_store_definition"],
            {"name": name, "digest": digest, "definition": Jsonb(definition), "plan": Jsonb(plan)},
        ).fetchone()
    assert row is not None
    return int(row[0])


def _ceiling(
    env: Env,
    schema: str,
    wid: int,
    template: dict[str, Any],
    count: int,
    chunk: int,
    mode: str,
) -> float:
    """Seconds to write ``count`` runs like ``template`` in chunks of ``chunk`` per
    transaction by ``mode`` (``unnest`` or ``COPY``)."""
    q = qualified(schema)
    _, flow_name, deadline, output_limit, max_wait = template["run"]
    steps: Sequence[tuple[Any, ...]] = template["steps"]
    deps: Sequence[tuple[str, str]] = template["deps"]
    write: Callable[[psycopg.Connection[Any], list[str], list[str]], None]

    def unnest(conn: psycopg.Connection[Any], ids: list[str], inputs: list[str]) -> None:
        with conn.pipeline():
            conn.execute(
                q["bench_bulk_runs_unnest"],
                {"wid": wid, "name": flow_name, "deadline": deadline, "output_limit":
                 output_limit, "max_wait": max_wait, "ids": ids, "inputs": inputs},
            )  # fmt: skip
            cols = list(zip(*(_copyable(step) for step in steps), strict=True))
            conn.execute(
                q["bench_bulk_steps_unnest"],
                {"ids": ids, **{f"s_{c}": list(v) for c, v in zip(STEP_COLS, cols, strict=True)}},
            )
            if deps:
                conn.execute(
                    q["bench_bulk_deps_unnest"],
                    {"ids": ids, "nodes": [d[0] for d in deps], "needs": [d[1] for d in deps]},
                )

    def copy(conn: psycopg.Connection[Any], ids: list[str], inputs: list[str]) -> None:
        with conn.cursor() as cur:
            with cur.copy(q["bench_bulk_runs_copy"]) as cp:
                for rid, text in zip(ids, inputs, strict=True):
                    cp.write_row((rid, wid, flow_name, text, deadline, output_limit, max_wait))
            with cur.copy(q["bench_bulk_steps_copy"]) as cp:
                for rid in ids:
                    for step in steps:
                        cp.write_row((rid, *_copyable(step)))
            if deps:
                with cur.copy(q["bench_bulk_deps_copy"]) as cp:
                    for rid in ids:
                        for node, need in deps:
                            cp.write_row((rid, node, need))

    write = unnest if mode == "unnest" else copy
    t0 = time.perf_counter()
    with psycopg.connect(env.url) as conn:
        for start in range(0, count, chunk):
            n = min(chunk, count - start)
            ids = [str(uuid.uuid4()) for _ in range(n)]
            inputs = [f'{{"i": {start + i}}}' for i in range(n)]
            with conn.transaction():
                write(conn, ids, inputs)
    return time.perf_counter() - t0


def _copyable(step: tuple[Any, ...]) -> tuple[Any, ...]:
    """A step row for COPY or a text array (json columns as JSON text)."""
    return tuple(json.dumps(v) if isinstance(v, dict | list) else v for v in step)


# -- one enqueue call ------------------------------------------------------------------------


def enqueue_latency(env: Env, *, samples: int) -> Result:
    """p50/p95 ms of one ``Client.enqueue`` at idle (no worker; the definition stored by a
    first call)."""
    with schema_for(env, "bench_enqueue") as schema:
        client = Client(env.url, schema=schema, workers=1)
        try:
            for i in range(20):  # warm: definition stored, pool connections open
                client.enqueue(NOOP, {"i": i})
            times = []
            for i in range(samples):
                t0 = time.perf_counter()
                client.enqueue(NOOP, {"i": i})
                times.append((time.perf_counter() - t0) * 1000)
        finally:
            client.shutdown()
    times.sort()
    p50 = statistics.median(times)
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    return Result(
        "enqueue call",
        None,
        p50,
        "ms (p50)",
        note=f"p50={p50:.3g}, p95={p95:.3g} ms over {samples} calls",
        extra={"p50_ms": round(p50, 4), "p95_ms": round(p95, 4), "samples": samples},
    )

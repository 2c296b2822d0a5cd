"""The ceiling: a plain psycopg loop running the engine's own claim and completion
statements (``step_claim_if_available``, ``step_complete_if_leased``, and what a completion
also runs: ``run_lock``, ``step_release_dependents_if_ready``, ``run_complete_if_done``) on
the engine's tables in a fresh migrated schema, with one connection per worker and no
Python engine in between.

Modes (all with the same number of connections as the engine benchmark's workers):

- ``1/tx``: claim one job per statement (its own transaction), complete it with
  ``step_complete_if_leased`` (its own transaction): the issue's one-per-transaction figure.
- ``batch50``: claim up to 50 per statement, complete them in one statement (an
  ``unnest`` UPDATE with the same per-row guard): the issue's batched figure.
- ``... idx``: the same with ``ceiling_claim_indexed`` (``queue = $1`` instead of
  ``queue = ANY($1)``), which Postgres 16 serves from the claim index in order instead of
  sorting the whole backlog. Since finding 1 was fixed the engine's
  ``step_claim_if_available`` is itself ``queue = $1`` (plus the run-input prefetch of
  finding 2), so ``1/tx`` / ``batch50`` and their ``idx`` twins now measure the same plan.
- ``... full idx``: the completion transaction runs every statement the engine's completion
  runs (run lock, CAS, release of dependents, run completion), pipelined: one round trip
  and one commit per job (``1/tx``) or per 50 jobs (``batch50``: group commit with today's
  statements).

Sizes: 5,000 jobs for ``1/tx`` (its claim sorts the whole backlog), 10,000 for the other
``1/tx`` modes, 20,000 for the ``batch50`` modes; ``--quick``: 100.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.common import Env, Result, load, pick, schema_for, server_counters
from benchmarks.sql import qualified as bench_qualified
from cyclone_flow import Client
from cyclone_flow.db.queries import qualified as engine_qualified

MODES = ("1/tx", "1/tx idx", "1/tx full idx", "batch50", "batch50 idx", "batch50 full idx")
CONNECTIONS = (1, 4, 8)
TTL_US = 30_000_000


def backlog(env: Env, schema: str, jobs: int) -> None:
    """Submit one single-step run through the engine, then clone it ``jobs - 1`` times
    (same rows as the engine writes; one statement instead of ``jobs`` submits)."""
    client = Client(env.url, schema=schema, workers=1)
    try:
        run_id = client.submit(load("noop"), {"i": 0})
    finally:
        client.shutdown()
    with psycopg.connect(env.url, autocommit=True) as conn:
        conn.execute(
            bench_qualified(schema)["bench_clone_runs"], {"run_id": run_id, "count": jobs - 1}
        )
        for table in ("cyclone_steps", "cyclone_runs"):
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(schema, table)))


def _loop(
    url: str, schema: str, mode: str, owner: str, start: threading.Barrier, done: list[int]
) -> None:
    q = engine_qualified(schema)
    b = bench_qualified(schema)
    limit = 50 if mode.startswith("batch50") else 1
    full = "full" in mode
    claim = b["ceiling_claim_indexed"] if mode.endswith("idx") else q["step_claim_if_available"]
    claim_args: dict[str, Any] = {
        "queues": ["default"], "queue": "default", "limit": limit, "owner": owner,
        "ttl_us": TTL_US, "run_id": None,
    }  # fmt: skip
    count = 0
    with psycopg.connect(url, autocommit=True) as conn:
        start.wait()
        while True:
            rows = conn.execute(claim, claim_args).fetchall()
            if not rows:
                break
            if full:
                with conn.pipeline(), conn.transaction():
                    # as the engine's completion does
                    conn.execute(q["session_force_generic_plans"])
                    for r in rows:  # id, run_id, node, ..., lease_generation at 9
                        conn.execute(q["run_lock"], {"run_id": r[1]})
                        conn.execute(
                            q["step_complete_if_leased"],
                            {"id": r[0], "owner": owner, "generation": r[9], "output": "null"},
                        )
                        conn.execute(
                            q["step_release_dependents_if_ready"],
                            {"run_ids": [r[1]], "nodes": [r[2]]},
                        )
                        conn.execute(q["run_complete_if_done"], {"run_ids": [r[1]]})
            elif limit == 1:
                r = rows[0]
                conn.execute(
                    q["step_complete_if_leased"],
                    {"id": r[0], "owner": owner, "generation": r[9], "output": "null"},
                ).fetchall()
            else:
                conn.execute(
                    b["ceiling_complete_many"],
                    {"ids": [r[0] for r in rows], "generations": [r[9] for r in rows],
                     "owner": owner},
                ).fetchall()  # fmt: skip
            count += len(rows)
    done.append(count)


def measure(env: Env, mode: str, connections: int, jobs: int) -> Result:
    """Drain a backlog of ``jobs`` single-step runs with ``connections`` loops in ``mode``."""
    with schema_for(env, "bench_ceiling") as schema:
        backlog(env, schema, jobs)
        start = threading.Barrier(connections + 1)
        done: list[int] = []
        threads = [
            threading.Thread(
                target=_loop, args=(env.url, schema, mode, f"ceiling/{i}", start, done)
            )
            for i in range(connections)
        ]
        for t in threads:
            t.start()
        before = server_counters(env)
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        after = server_counters(env)
        completed = sum(done)
    if completed != jobs:
        raise RuntimeError(f"ceiling {mode}: completed {completed} of {jobs} jobs")
    extra: dict[str, Any] = {"jobs": jobs, "wall_s": round(wall, 3)}
    extra["commits_per_job"] = round((after.commits - before.commits) / jobs, 3)
    if after.cpu_s is not None and before.cpu_s is not None:
        extra["server_cpu_ms_per_job"] = round(1000 * (after.cpu_s - before.cpu_s) / jobs, 3)
    return Result(f"ceiling {mode}", connections, round(jobs / wall, 1), "jobs/s", extra=extra)


def run(env: Env, *, quick: bool, connections: tuple[int, ...] = CONNECTIONS) -> list[Result]:
    """Every mode at every connection count (sizes in the module docstring; quick: 100)."""
    results = []
    for mode in MODES:
        if mode == "1/tx":  # its claim sorts the whole backlog: smaller, or it takes minutes
            jobs = pick((5_000, 100), quick)
        else:
            jobs = pick((20_000 if mode.startswith("batch50") else 10_000, 100), quick)
        for n in connections:
            results.append(measure(env, mode, n, jobs))
    return results

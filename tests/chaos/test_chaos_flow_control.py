"""Flow control across real worker processes (docs/flow-control.md): a
concurrency limit holds across 8 workers in 2 processes (sampled from the database every
few milliseconds, and checked exactly on the steps' own timestamps), and the slots of a
SIGKILLed worker are freed by the recovery sweep after its leases expire, while the other
keys run on meanwhile."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from helpers.procs import WorkerProcess, wait_until

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text

ONE_KEY = """
name: one_key
nodes:
  work:
    call: cyclone_test_handlers.limits:hold
    input: {ms: "${{ run.input.ms }}"}
    concurrency: {key: "${{ run.input.customer }}", limit: 1}
"""

TWO_SLOTS = """
name: two_slots
nodes:
  work:
    call: cyclone_test_handlers.limits:hold
    concurrency: {key: "${{ run.input.customer }}", limit: 2}
    rate_limit: {group: all, limit: 1000000, per: 366d}
"""

FAST = ("--poll-interval", "10ms,200ms")


def _states(db: psycopg.Connection[Any]) -> dict[str, int]:
    rows = db.execute("SELECT state, count(*) FROM cyclone_runs GROUP BY state").fetchall()
    return {r[0]: r[1] for r in rows}


class Sampler(threading.Thread):
    """Counts the running steps of one concurrency key every ``every_s`` seconds on its
    own connection; ``peak`` is the most seen at once, ``samples`` how many were read."""

    def __init__(self, database_url: str, schema: str, key: str, every_s: float = 0.003):
        super().__init__(name="limits-sampler", daemon=True)
        self.database_url, self.schema, self.key, self.every_s = database_url, schema, key, every_s
        self.peak = 0
        self.samples = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{self.schema}"')
            while not self.stop.is_set():
                (n,) = conn.execute(
                    "SELECT count(*) FROM cyclone_steps"
                    " WHERE state = 'running' AND concurrency_key = %s",
                    (self.key,),
                ).fetchone() or (0,)
                self.peak = max(self.peak, n)
                self.samples += 1
                time.sleep(self.every_s)


def test_limit_one_holds_for_200_runs_of_one_key_on_8_workers_in_2_processes(
    make_client: Callable[..., Client],
    db: psycopg.Connection[Any],
    database_url: str,
    schema: str,
    tmp_path: Path,
) -> None:
    client = make_client()
    flow = load_flow_text(ONE_KEY)
    client.submit_many(flow, [{"customer": "c-1", "ms": 2} for _ in range(200)])
    sampler = Sampler(database_url, schema, "one_key.work/c-1")
    sampler.start()
    procs = [
        WorkerProcess(
            database_url,
            schema,
            tmp_path / f"w{i}.log",
            workers=4,
            lease_ttl="5s",
            extra_args=FAST,
        )
        for i in range(2)
    ]
    try:
        wait_until(lambda: _states(db).get("completed") == 200, 120, what="200 runs completed")
    finally:
        sampler.stop.set()
        sampler.join()
        for p in procs:
            p.terminate()
    assert _states(db) == {"completed": 200}
    assert sampler.samples > 100, sampler.samples
    assert sampler.peak == 1, f"{sampler.peak} steps of the key ran at once"
    # exact: each claim of the key started after the previous step of it had finished
    spans = db.execute(
        "SELECT started_at, finished_at, lease_owner FROM cyclone_steps"
        " WHERE concurrency_key = 'one_key.work/c-1' ORDER BY started_at"
    ).fetchall()
    assert len(spans) == 200
    for (_, before, _), (after, _, _) in itertools.pairwise(spans):
        assert after > before, f"a step started at {after} before the one before ended ({before})"


def test_sigkilled_worker_frees_its_slots_after_lease_expiry_and_a_sweep(
    make_client: Callable[..., Client],
    db: psycopg.Connection[Any],
    database_url: str,
    schema: str,
    tmp_path: Path,
) -> None:
    client = make_client()
    flow = load_flow_text(TWO_SLOTS)
    held = client.submit_many(flow, [{"customer": "hot"} for _ in range(12)])
    # a worker that holds whatever it claims for a minute: it takes the key's 2 slots
    doomed = WorkerProcess(
        database_url,
        schema,
        tmp_path / "doomed.log",
        workers=4,
        lease_ttl="1s",
        env={"LIMITS_HOLD_S": "60"},
        extra_args=FAST,
    )
    try:
        wait_until(
            lambda: (
                db.execute("SELECT count(*) FROM cyclone_steps WHERE state = 'running'").fetchone()
                == (2,)
            ),
            30,
            what="the doomed worker to hold the 2 slots",
        )
        # the limit holds: the 2 other worker threads of that process took nothing more
        time.sleep(0.3)
        running = db.execute(
            "SELECT count(*) FROM cyclone_steps WHERE state = 'running'"
        ).fetchone()
        assert running == (2,)
        waiting = client.explain(held[-1])["work"]
        assert waiting.reason == "concurrency", waiting
        assert "waiting: concurrency key two_slots.work/hot at limit 2" in waiting.text
    finally:
        doomed.kill()
    # the dead worker's steps hold the key's slots until the sweep reclaims them; other
    # keys' runs proceed meanwhile on a live worker (whose sweep is what frees them)
    other = client.submit_many(flow, [{"customer": f"other-{i}"} for i in range(5)])
    live = WorkerProcess(
        database_url, schema, tmp_path / "live.log", workers=4, lease_ttl="1s", extra_args=FAST
    )
    try:
        wait_until(
            lambda: all(client.get_run(r).state == "completed" for r in other),
            60,
            what="the other keys' runs",
        )
        wait_until(lambda: _states(db) == {"completed": 17}, 60, what="every run completed")
    finally:
        live.terminate()
    reclaimed = db.execute(
        "SELECT count(*) FROM cyclone_steps WHERE concurrency_key = 'two_slots.work/hot'"
        " AND reclaims = 1"
    ).fetchone()
    assert reclaimed == (2,), "the two held steps came back through the sweep"
    no_running = db.execute("SELECT count(*) FROM cyclone_steps WHERE state = 'running'").fetchone()
    assert no_running == (0,)
    # the one counter (the rate key's sliding log) agrees with the rows after the kill:
    # each claim was a first attempt, a retry (attempt - 1) or a reclaim after the sweep
    counted = db.execute(
        "SELECT sum(n)::int FROM cyclone_rate_windows, unnest(bucket_claims) AS n"
        " WHERE rate_key = 'all'"
    ).fetchone()
    claims = db.execute(
        "SELECT sum(attempt + reclaims)::int FROM cyclone_steps WHERE rate_key = 'all'"
    ).fetchone()
    assert counted == claims == (19,)

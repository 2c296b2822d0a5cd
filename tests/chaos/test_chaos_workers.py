"""Chaos: real worker processes are SIGKILLed at random while runs write ledger rows
through ``ctx.completion_tx()``; every run must complete with exactly one ledger row per
(run, node) (Engine Design: Leases and Heartbeats, ctx.CompletionTx())."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from cyclone_test_handlers.harness import WorkerProcess, create_ledger, wait_until

from cyclone_flow.spec import load_flow_text

CHAIN = """
name: chaos_chain
nodes:
  a:
    call: cyclone_test_handlers.engine:ledger
  b:
    call: cyclone_test_handlers.engine:ledger
    needs: [a]
  c:
    call: cyclone_test_handlers.engine:ledger
    needs: [b]
"""
NODES = ("a", "b", "c")


def _run_chaos(
    make_client: Any,
    db: Any,
    schema: str,
    database_url: str,
    tmp_path: Path,
    *,
    runs: int,
    processes: int,
    chaos_for: float,
    settle_for: float,
) -> None:
    create_ledger(db)
    rng = random.Random()
    submitter = make_client()
    flow = load_flow_text(CHAIN)
    run_ids = [submitter.submit(flow, {"schema": schema, "sleep": 0.2}) for _ in range(runs)]
    counter = 0

    def spawn() -> WorkerProcess:
        nonlocal counter
        counter += 1
        return WorkerProcess(
            database_url, schema, tmp_path / f"worker-{counter}.log", workers=2, lease_ttl="1s"
        )

    def unfinished() -> int:
        row = db.execute("SELECT count(*) FROM cyclone_runs WHERE state = 'running'").fetchone()
        return int(row[0])

    workers = [spawn() for _ in range(processes)]
    kills = 0
    try:
        deadline = time.monotonic() + chaos_for
        while time.monotonic() < deadline and unfinished():
            time.sleep(rng.uniform(0.3, 0.5))  # the chaos pace, not a synchronisation
            victim = workers.pop(rng.randrange(len(workers)))
            victim.kill()
            kills += 1
            workers.append(spawn())
        wait_until(
            lambda: unfinished() == 0,
            timeout=settle_for,
            interval=0.1,
            what="every run to finish after the chaos stopped",
        )
    finally:
        for worker in workers:
            worker.kill()

    states = db.execute("SELECT state, count(*) FROM cyclone_runs GROUP BY state").fetchall()
    assert dict(states) == {"completed": runs}
    per_step = db.execute(
        """SELECT s.run_id::text, s.node, count(l.id)
           FROM cyclone_steps s LEFT JOIN ledger l ON l.run_id = s.run_id AND l.node = s.node
           GROUP BY s.run_id, s.node"""
    ).fetchall()
    assert len(per_step) == runs * len(NODES)
    assert {r[0] for r in per_step} == set(run_ids)
    duplicates_or_missing = [r for r in per_step if r[2] != 1]
    assert duplicates_or_missing == []
    assert db.execute("SELECT count(*) FROM ledger").fetchone()[0] == runs * len(NODES)
    assert (
        db.execute(
            "SELECT count(*) FROM cyclone_steps WHERE state <> 'completed' OR attempt <> 1"
        ).fetchone()[0]
        == 0
    )
    reclaims = db.execute("SELECT coalesce(sum(reclaims), 0) FROM cyclone_steps").fetchone()[0]
    print(f"chaos: {kills} kills, {reclaims} reclaims")
    assert kills >= 3, f"only {kills} kills: the chaos never happened"
    assert reclaims >= 1, f"{kills} kills reclaimed no step: the chaos never hit a handler"


def test_sigkill_random_workers_exactly_one_ledger_row_per_step(
    make_client, db, schema, database_url, tmp_path
) -> None:
    _run_chaos(
        make_client,
        db,
        schema,
        database_url,
        tmp_path,
        runs=20,
        processes=3,
        chaos_for=15.0,
        settle_for=20.0,
    )


@pytest.mark.slow
def test_sigkill_random_workers_soak(make_client, db, schema, database_url, tmp_path) -> None:
    _run_chaos(
        make_client,
        db,
        schema,
        database_url,
        tmp_path,
        runs=150,
        processes=4,
        chaos_for=90.0,
        settle_for=60.0,
    )

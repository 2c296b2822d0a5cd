"""The recovery sweep after a big crash: one pass batches while a batch comes
back full, within its pass budget, and each batch's ``LIMIT`` holds whatever the plan
(``step_rescue_if_lease_expired`` picks its ids in a MATERIALIZED CTE); a real worker process
killed with its leases has them back within the documented bound (docs/deployment.md:
``--lease-ttl`` plus one sweep interval plus the pass)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.engine import claim, database
from helpers.procs import WorkerProcess, wait_until
from psycopg_pool import ConnectionPool

from cyclone_flow import Client, migrate
from cyclone_flow.db.conn import Database
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.maintenance.rescuer import SWEEP_BATCH, Rescuer, RescuerConfig

TTL_S = 5.0
FIVE = load_flow_text(
    "name: five_roots\nnodes:\n"
    + "".join(f'  n{i}: {{call: "cyclone_test_handlers.basic:echo"}}\n' for i in range(5))
)


def _expired_leases(client: Client, count: int) -> Any:
    """``count`` steps claimed by a dead owner (runs of five root nodes); returns the
    database's clock after the claims."""
    for _ in range(count // 5):
        client.submit(FIVE, {})
    claimed = claim(client, "dead-worker", TTL_S, ["default"], count)
    assert len(claimed) == count
    with database(client).session() as s:
        row = s.conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def test_one_pass_reclaims_1500_expired_leases(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """1,500 expired leases (three times the batch) come back in ONE ``run_once``: the
    pass runs batches while they come back full, rather than one batch of 500 leaving the
    rest to the next sweeps."""
    client = make_client()
    claimed_at = _expired_leases(client, 1500)
    rescuer = Rescuer(database(client), RescuerConfig(batch_size=SWEEP_BATCH))
    result = rescuer.run_once(now=claimed_at + timedelta(seconds=TTL_S + 1))
    assert result.rescued == 1500
    assert db.execute("SELECT state, count(*) FROM cyclone_steps GROUP BY state").fetchall() == [
        ("available", 1500)
    ]


def test_each_batch_holds_its_limit_and_the_budget_bounds_a_pass(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """A pass whose budget is spent stops after the batch that is running: with a budget of
    0 s one pass is one batch of exactly ``batch_size`` steps, and the next pass takes the
    next batch (the statement's ``LIMIT 100`` holds on this table whatever the plan: a
    first pass never reclaims all 300)."""
    client = make_client()
    claimed_at = _expired_leases(client, 300)
    later = claimed_at + timedelta(seconds=TTL_S + 1)
    rescuer = Rescuer(database(client), RescuerConfig(batch_size=100, pass_budget_s=0.0))
    assert [rescuer.run_once(now=later).rescued for _ in range(4)] == [100, 100, 100, 0]
    assert RescuerConfig(interval_s=8.0).budget_s == 4.0  # default: half the interval


@pytest.fixture
def fresh_schema(database_url: str) -> Iterator[str]:
    """A schema migrated now, whose tables have never been analysed (dropped after)."""
    name = f"nostats_{uuid.uuid4().hex[:10]}"
    migrate(database_url, schema=name)
    try:
        yield name
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


def test_each_batch_holds_its_limit_on_a_table_without_statistics(
    database_url: str, fresh_schema: str
) -> None:
    """On a ``cyclone_steps`` never analysed (``reltuples = -1``), with the planner kept
    from hash and merge joins (the nested-loop plans that can run a ``FOR UPDATE SKIP
    LOCKED LIMIT`` subquery again per outer row), one batch changes exactly
    ``batch_size`` rows."""
    client = Client(database_url, schema=fresh_schema, lease_ttl=TTL_S)
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(
                f"ALTER TABLE {fresh_schema}.cyclone_steps SET (autovacuum_enabled = false)"
            )
        claimed_at = _expired_leases(client, 1500)
        with psycopg.connect(database_url, autocommit=True) as conn:
            reltuples = conn.execute(
                "SELECT reltuples FROM pg_class WHERE oid = %s::regclass",
                (f"{fresh_schema}.cyclone_steps",),
            ).fetchone()
        assert reltuples == (-1.0,)  # no statistics

        def no_hash_joins(conn: psycopg.Connection[Any]) -> None:
            conn.execute("SET enable_hashjoin = off")
            conn.execute("SET enable_mergejoin = off")
            conn.commit()

        with ConnectionPool(
            database_url, min_size=1, max_size=1, configure=no_hash_joins, open=True
        ) as pool:
            rescuer = Rescuer(
                Database(pool, fresh_schema), RescuerConfig(batch_size=500, pass_budget_s=0.0)
            )
            later = claimed_at + timedelta(seconds=TTL_S + 1)
            assert [rescuer.run_once(now=later).rescued for _ in range(4)] == [500, 500, 500, 0]
    finally:
        client.shutdown(timeout=2.0)


def test_a_killed_worker_s_leases_come_back_within_the_documented_bound(
    make_client: Callable[..., Client],
    db: psycopg.Connection[Any],
    database_url: str,
    schema: str,
    tmp_path: Path,
) -> None:
    """A real ``cyclone-flow worker`` holding 40 leases is SIGKILLed; a live client's sweep
    (lease TTL 1 s, sweep interval 0.5 s) has every step claimable again within the
    documented bound: TTL + one sweep interval + the pass budget (half an interval), with
    one more interval of slack for the test's polling."""
    sleepy = load_flow_text(
        'name: sleepy\nnodes:\n  a: {call: "cyclone_test_handlers.queueing:sleep"}\n'
    )
    proc = WorkerProcess(database_url, schema, tmp_path / "worker.log", workers=40)
    try:
        submitter = make_client()
        for _ in range(40):
            submitter.submit(sleepy, {"sleep": 60})

        def running() -> bool:
            rows = db.execute("SELECT count(*) FROM cyclone_steps WHERE state = 'running'")
            return rows.fetchone() == (40,)

        wait_until(running, timeout=30, what="the worker holds 40 leases")
    finally:
        proc.kill()
    killed_at = time.monotonic()
    sweeper = make_client(sweep_interval=0.5, worker_queues={"elsewhere": 1})
    sweeper.start()

    def back() -> bool:
        rows = db.execute("SELECT count(*) FROM cyclone_steps WHERE state = 'available'")
        return rows.fetchone() == (40,)

    wait_until(back, timeout=10, what="every lease reclaimed")
    elapsed = time.monotonic() - killed_at
    assert elapsed < 1.0 + 0.5 + 0.25 + 0.5, elapsed
    reclaims = db.execute("SELECT sum(reclaims), sum(attempt) FROM cyclone_steps").fetchone()
    assert reclaims == (40, 40)  # reclaimed once each, no attempt charged

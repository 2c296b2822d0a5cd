"""The pool budget rule when a caller passes its own psycopg_pool.ConnectionPool:
max_size >= tx_slots + 6 (real Postgres)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cyclone_test_handlers import engine
from helpers.engine import database
from helpers.procs import wait_until
from helpers.rows import create_ledger, step_row
from psycopg_pool import ConnectionPool

from cyclone_flow import Client
from cyclone_flow.errors import ConfigError
from cyclone_flow.flowfile import load_flow_text


@pytest.fixture
def make_pool(database_url: str) -> Iterator[Any]:
    pools: list[ConnectionPool[Any]] = []

    def factory(max_size: int) -> ConnectionPool[Any]:
        pool: ConnectionPool[Any] = ConnectionPool(
            database_url, min_size=1, max_size=max_size, open=True
        )
        pools.append(pool)
        return pool

    yield factory
    for pool in pools:
        pool.close()


def test_small_pool_is_rejected_with_the_budget(make_pool: Any, schema: str) -> None:
    pool = make_pool(9)
    with pytest.raises(ConfigError) as info:
        Client(pool, schema=schema)  # tx_slots defaults to workers = 4: needs 10
    message = str(info.value)
    assert "max_size is 9" in message
    assert "tx_slots + 6 = 4 + 6 = 10" in message
    assert not pool.closed, "a rejected pool is the caller's: it must stay open"


def test_budget_follows_workers_and_tx_slots(make_pool: Any, schema: str) -> None:
    with pytest.raises(ConfigError, match=r"4 \+ 6 = 10"):
        Client(make_pool(9), schema=schema, workers=4)
    with pytest.raises(ConfigError, match=r"8 \+ 6 = 14"):
        Client(make_pool(13), schema=schema, workers=8)
    with pytest.raises(ConfigError, match=r"2 \+ 6 = 8"):
        Client(make_pool(7), workers=8, tx_slots=2, schema=schema)


def test_pool_at_the_budget_is_accepted_and_not_closed(make_pool: Any, schema: str) -> None:
    pool = make_pool(8)
    client = Client(pool, schema=schema, workers=8, tx_slots=2)
    try:
        assert client.config.pool_min_size == 8
        assert client.list_runs() == []
    finally:
        client.shutdown(timeout=2.0)
    assert not pool.closed, "shutdown must not close a pool the caller owns"


def test_with_a_url_the_client_sizes_its_own_pool(database_url: str, schema: str) -> None:
    client = Client(database_url, schema=schema, worker_queues={"a": 3, "b": 2}, tx_slots=4)
    try:
        assert database(client).pool.max_size == 4 + 6
    finally:
        client.shutdown(timeout=2.0)
    assert database(client).pool.closed, "a pool the client opened is closed by shutdown"
    default = Client(database_url, schema=schema)
    try:
        assert default._pool.max_size == 10  # workers 4 -> tx_slots 4 -> 4 + 6
    finally:
        default.shutdown(timeout=2.0)


def test_a_pool_at_the_budget_serves_every_slot_and_api_calls(
    make_pool: Any, schema: str, db: Any
) -> None:
    """With max_size exactly tx_slots + 6 and every tx slot held by a handler inside
    ctx.completion_tx(), the client still heartbeats, submits and answers API calls."""
    create_ledger(db)
    ttl = 1.0
    client = Client(
        make_pool(2 + 6),
        schema=schema,
        workers=2,
        tx_slots=2,
        lease_ttl=ttl,
        poll_interval=(0.02, 0.2),
        allow_modules=["cyclone_test_handlers"],
    )
    gate = load_flow_text(
        "name: budget\nnodes:\n  s: {call: 'cyclone_test_handlers.engine:gate'}\n"
    )
    keys = [uuid.uuid4().hex for _ in range(2)]
    try:
        client.start()
        runs = [client.submit(gate, {"schema": schema, "key": k}) for k in keys]
        for key in keys:  # both handlers hold a completion transaction and block
            assert engine.event(key, "entered").wait(10)

        def both_past_two_ttls() -> list[dict[str, Any]] | None:
            rows = [step_row(db, rid) for rid in runs]
            old = all((r["db_now"] - r["started_at"]).total_seconds() > 2 * ttl for r in rows)
            return rows if old else None

        rows = wait_until(both_past_two_ttls, timeout=10, what="handlers past two lease TTLs")
        assert all(r["state"] == "running" and r["lease_expiry"] > r["db_now"] for r in rows)
        assert client.get_run(runs[0]).state == "running"
        extra = client.submit(load_flow_text("name: other\nnodes:\n  s: {call: 'm:f', queue: q}\n"))
        assert [s.state for s in client.list_steps(extra)] == ["available"]
        for key in keys:
            engine.event(key, "release").set()
        for rid in runs:
            assert client.wait(rid, timeout=10).state == "completed"
    finally:
        for key in keys:
            engine.event(key, "release").set()
        client.shutdown(timeout=2.0)

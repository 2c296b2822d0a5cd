"""The pool budget rule when a caller passes its own psycopg_pool.ConnectionPool:
max_size >= tx_slots + 6 (real Postgres)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from cyclone_flow import Client
from cyclone_flow.errors import ConfigError


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

"""Shared fixtures: a real Postgres for the whole session (the embedded pgserver, or
``CYCLONE_TEST_DATABASE_URL``), one fresh migrated schema per test, and clients that are
shut down after the test."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cyclone_flow import Client
from cyclone_flow.store.migrate import migrate


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="run long soak/chaos variants")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A URL of a real Postgres: ``CYCLONE_TEST_DATABASE_URL`` or an embedded server."""
    url = os.environ.get("CYCLONE_TEST_DATABASE_URL")
    if url:
        yield url
        return
    import pgserver

    with tempfile.TemporaryDirectory(prefix="cyclone-test-pg-") as tmp:
        server = pgserver.get_server(Path(tmp) / "pgdata", cleanup_mode="stop")
        try:
            uri = server.get_uri()
            with psycopg.connect(uri, autocommit=True) as conn:
                max_conn = conn.execute("SHOW max_connections").fetchone()
            assert max_conn is not None
            yield uri
        finally:
            server.cleanup()


@pytest.fixture
def schema(database_url: str) -> Iterator[str]:
    """A fresh schema with every migration applied; dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url) as conn:
        migrate(conn, name)
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def make_client(database_url: str, schema: str) -> Iterator[Callable[..., Client]]:
    """Build clients on the test's schema with short timings; all shut down after."""
    clients: list[Client] = []

    def factory(**options: Any) -> Client:
        opts: dict[str, Any] = {
            "schema": schema,
            "lease_ttl": 2.0,
            "poll_interval": (0.02, 0.2),
        }
        opts.update(options)
        client = Client(database_url, **opts)
        clients.append(client)
        return client

    yield factory
    for client in clients:
        client.shutdown(timeout=2.0)


@pytest.fixture
def db(database_url: str, schema: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection whose search_path is the test's schema."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        yield conn

"""The migration tests build their schemas themselves: ``schema`` here is a schema
migrated for this test alone (not one of the pool's reused schemas) and dropped after."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from cyclone_flow.db.migrate import migrate


@pytest.fixture
def schema(database_url: str) -> Iterator[str]:
    """A fresh schema with every migration applied; dropped after the test."""
    name = f"mt_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url) as conn:
        migrate(conn, name)
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))

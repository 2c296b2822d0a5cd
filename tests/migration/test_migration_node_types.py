"""Migration 0002 (node types): safe to apply twice, and a schema with runs written
before it keeps working (their definitions get a plan at their next submit)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from cyclone_flow import Client, migrate
from cyclone_flow.db.migrate import migrations
from cyclone_flow.flowfile import load_flow_text

FLOW = load_flow_text(
    """
name: legacy
nodes:
  a: {call: "cyclone_test_handlers.basic:echo"}
  b: {call: "cyclone_test_handlers.basic:echo", needs: [a]}
"""
)


@pytest.fixture
def v1_schema(database_url: str) -> Iterator[str]:
    """A schema with only migration 0001 applied (as a deployment before node types)."""
    name = f"v1_{uuid.uuid4().hex[:12]}"
    first = next(m for m in migrations() if m.version == 1)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(name)))
        conn.execute(first.sql.encode())
        conn.execute(
            "CREATE TABLE cyclone_schema_version (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute("INSERT INTO cyclone_schema_version (version, name) VALUES (1, 'initial')")
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def test_0002_applies_twice_and_old_rows_keep_working(database_url: str, v1_schema: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(v1_schema)))
        # a definition and a pending run written by the code before node types
        wf = conn.execute(
            "INSERT INTO cyclone_workflows (name, digest, definition) VALUES (%s, %s, %s)"
            " RETURNING id",
            (FLOW.name, FLOW.digest, json.dumps(FLOW.document)),
        ).fetchone()
        assert wf is not None
        run = conn.execute(
            "INSERT INTO cyclone_runs (workflow_id, flow_name, input) VALUES (%s, 'legacy', '1')"
            " RETURNING id",
            wf,
        ).fetchone()
        assert run is not None
        conn.execute(
            "INSERT INTO cyclone_steps (run_id, node, call, state) VALUES"
            " (%s, 'a', 'cyclone_test_handlers.basic:echo', 'available'),"
            " (%s, 'b', 'cyclone_test_handlers.basic:echo', 'pending')",
            (run[0], run[0]),
        )
        conn.execute(
            "INSERT INTO cyclone_deps (run_id, node, depends_on) VALUES (%s, 'b', 'a')", run
        )
        node_types = next(m for m in migrations() if m.version == 2)
        conn.execute(node_types.sql.encode())
        conn.execute(node_types.sql.encode())  # safe twice
    assert migrate(database_url, schema=v1_schema) == [m.version for m in migrations()][1:]
    client = Client(database_url, schema=v1_schema, workers=2, lease_ttl=2.0)
    try:
        client.start()
        old = client.wait(str(run[0]), timeout=20)
        assert (old.state, old.output) == ("completed", {"b": 1})
        new = client.submit(FLOW, 2)  # same digest: the stored row gets its plan now
        assert client.wait(new, timeout=20).output == {"b": 2}
    finally:
        client.shutdown()
    with psycopg.connect(database_url, autocommit=True) as conn:
        plan: Any = conn.execute(
            sql.SQL("SELECT plan FROM {}.cyclone_workflows").format(sql.Identifier(v1_schema))
        ).fetchall()
    assert len(plan) == 1 and [n["node"] for n in plan[0][0]["nodes"]] == ["a", "b"]

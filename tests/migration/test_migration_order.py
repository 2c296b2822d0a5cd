"""Migrations developed in parallel (0002 node types, 0003 queue features, 0004 retention;
0005 workers, 0006 step logs, 0007 isolated runs, 0008 dashboard indexes, 0009 one claim
index; 0010 when and rerun, 0011 flow control, 0012 trace context and 0013 limit keys and
sliding rates are applied with the rest) land in
either order: a schema migrated without one of them is refused by a client (the missing
version is named, even below the highest applied one), ``migrate`` applies the missing
one, and the features of both then work together on that schema (Engine Design: Schema
Isolation and Migrations)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from cyclone_flow import Client, SchemaOutdatedError, migrate
from cyclone_flow.db.migrate import migrations
from cyclone_flow.flowfile import load_flow_text

FLOW = load_flow_text(
    """
name: ordered
nodes:
  make: {call: "cyclone_test_handlers.node_types:numbers", input: {n: 3}}
  each:
    type: fan_out
    needs: [make]
    over: "${{ nodes.make.output.items }}"
    call: "cyclone_test_handlers.node_types:square"
"""
)


def _partial_schema(database_url: str, versions: list[int]) -> str:
    """A fresh schema with only ``versions`` applied, in that order (as a deployment of a
    build that shipped only those migrations)."""
    name = f"mo_{uuid.uuid4().hex[:12]}"
    by_version = {m.version: m for m in migrations()}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(name)))
        conn.execute(
            "CREATE TABLE cyclone_schema_version (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version in versions:
            mig = by_version[version]
            conn.execute(mig.sql.encode())
            conn.execute(
                "INSERT INTO cyclone_schema_version (version, name) VALUES (%s, %s)",
                (mig.version, mig.name),
            )
    return name


@pytest.fixture
def schemas(database_url: str) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    with psycopg.connect(database_url, autocommit=True) as conn:
        for name in made:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _use(database_url: str, schema: str) -> Client:
    return Client(database_url, schema=schema, workers=2, lease_ttl=2.0, poll_interval=(0.02, 0.2))


# the migrations after 0009 (added since these cases were written): applied with the rest
LATER = [m.version for m in migrations() if m.version > 9]


@pytest.mark.parametrize(
    ("deployed", "missing"),
    [
        ([1, 3, 4, 5, 6, 7, 8, 9, *LATER], [2]),
        ([1, 2], [3, 4, 5, 6, 7, 8, 9, *LATER]),
        ([1, 2, 4, 5, 6, 7], [3, 8, 9, *LATER]),
    ],
)
def test_a_missing_migration_is_named_then_applied_and_both_features_work(
    database_url: str, schemas: list[str], deployed: list[int], missing: list[int]
) -> None:
    schema = _partial_schema(database_url, deployed)
    schemas.append(schema)
    with pytest.raises(SchemaOutdatedError) as info:
        Client(database_url, schema=schema)
    assert info.value.missing == tuple(missing)
    assert f"run `cyclone-flow migrate --schema {schema}`" in str(info.value)
    assert migrate(database_url, schema=schema) == missing
    assert migrate(database_url, schema=schema) == []
    client = _use(database_url, schema)
    try:
        first = client.submit(FLOW, None, unique_key="k", sequence="s", priority=2)
        again = client.submit(FLOW, None, unique_key="k")
        assert again == first and again.duplicate
        client.start()
        assert client.wait(first, timeout=20).output == {"each": [0, 1, 4]}
    finally:
        client.shutdown()


def test_every_migration_applies_twice_in_either_order_of_0002_and_0003(
    database_url: str, schemas: list[str]
) -> None:
    """The SQL of 0002 and 0003 applied again over a complete schema (each is written to
    be safe twice) changes nothing a client notices."""
    schema = _partial_schema(database_url, [1, 3, 2, 4, 5, 6, 7, 8, 9, *LATER])
    schemas.append(schema)
    by_version = {m.version: m for m in migrations()}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        for version in (3, 2, 4, 2, 3, 10):
            conn.execute(by_version[version].sql.encode())
        triggers: Any = conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgname = 'cyclone_runs_state_change'"
            " AND tgrelid = 'cyclone_runs'::regclass"
        ).fetchone()
    assert triggers == (1,)
    client = _use(database_url, schema)
    try:
        run_id = client.submit(FLOW, None, sequence="again")
        client.start()
        assert client.wait(run_id, timeout=20).state == "completed"
    finally:
        client.shutdown()


def test_a_schedule_stored_before_plans_still_ticks(database_url: str, schemas: list[str]) -> None:
    """A schedule written by a build with 0003 but without 0002 points at a definition
    without a compiled plan: its tick compiles and stores the plan, then runs as usual."""
    simple = load_flow_text(
        'name: legacy-tick\nnodes:\n  a: {call: "cyclone_test_handlers.basic:echo"}\n'
    )
    schema = _partial_schema(database_url, [1, 3, 4, 5, 6, 7])
    schemas.append(schema)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        wf: Any = conn.execute(
            "INSERT INTO cyclone_workflows (name, digest, definition) VALUES (%s, %s, %s)"
            " RETURNING id",
            (simple.name, simple.digest, json.dumps(simple.document)),
        ).fetchone()
        conn.execute(
            "INSERT INTO cyclone_schedules (name, flow_name, workflow_id, cron, input,"
            " next_run_at) VALUES ('old', 'legacy-tick', %s, '* * * * *', '{\"x\": 1}',"
            " now() - interval '1 second')",
            wf,
        )
    assert migrate(database_url, schema=schema) == [2, 8, 9, *LATER]
    client = _use(database_url, schema)
    try:
        assert client.schedule_scanner.run_once().submitted == 1
        client.start()
        (row,) = client.list_runs(flow="legacy-tick")
        assert client.wait(row.id, timeout=20).output == {"a": {"x": 1}}
    finally:
        client.shutdown()
    with psycopg.connect(database_url, autocommit=True) as conn:
        plan: Any = conn.execute(
            sql.SQL("SELECT plan IS NOT NULL FROM {}.cyclone_workflows").format(
                sql.Identifier(schema)
            )
        ).fetchall()
    assert plan == [(True,)]

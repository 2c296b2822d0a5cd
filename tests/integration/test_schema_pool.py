"""The schema pool behind the ``schema`` fixture (``helpers.schema_pool``): a schema comes
back to the next test exactly as a fresh migration leaves it, or not at all. Each test
drives a pool of its own (its own ``application_name``) against the session's server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from helpers.catalog import describe_schema
from helpers.schema_pool import SchemaPool
from psycopg import sql

from cyclone_flow import Client
from cyclone_flow.db.migrate import migrations
from cyclone_flow.flowfile import load_flow_text

FLOW = load_flow_text("name: p\nnodes:\n  a: {call: 'cyclone_test_handlers.basic:echo'}\n")


@pytest.fixture
def pool(database_url: str) -> Iterator[SchemaPool]:
    # one schema: every acquire() waits for the cleaner, so a test sees one schema reused
    pool = SchemaPool(database_url, app_name=f"pool-test-{uuid.uuid4().hex[:8]}", size=1)
    yield pool
    pool.close()


def _connect(url: str, schema: str, app_name: str = "") -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True, application_name=app_name)
    conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema)))
    return conn


def _schema_exists(url: str, name: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (name,)).fetchone() == (True,)


def test_rows_are_deleted_and_identities_restart(database_url: str, pool: SchemaPool) -> None:
    name = pool.acquire()
    client = Client(database_url, schema=name, workers=1, poll_interval=(0.02, 0.2))
    try:
        client.start()
        run_id = client.submit(FLOW, {"x": 1})
        assert client.wait(run_id, timeout=20).state == "completed"
    finally:
        client.shutdown(timeout=2.0)
    pool.release(name)

    assert pool.acquire() == name  # the same schema, reused
    with _connect(database_url, name) as conn:
        for table in ("cyclone_workflows", "cyclone_runs", "cyclone_steps", "cyclone_deps"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
        versions = (len(migrations()),)
        assert conn.execute("SELECT count(*) FROM cyclone_schema_version").fetchone() == versions
        conn.execute(
            "INSERT INTO cyclone_workflows (name, digest, definition) VALUES ('a', 'b', '{}')"
        )
        assert conn.execute("SELECT id FROM cyclone_workflows").fetchone() == (1,)
    assert pool.counts["reused"] == 1 and pool.counts["migrated"] == 1


def test_rows_come_back_in_the_physical_order_of_a_fresh_table(
    database_url: str, pool: SchemaPool
) -> None:
    """Queries without ORDER BY return rows in the order of the table file: a reused
    table must start as empty as a fresh one (deleting rows would leave their slots to
    be reused in another order)."""
    name = pool.acquire()
    with _connect(database_url, name) as conn:
        conn.execute(
            "INSERT INTO cyclone_sequences (key) SELECT g::text FROM generate_series(1, 50) g"
        )
        conn.execute("DELETE FROM cyclone_sequences")  # written, but empty again
    pool.release(name)

    assert pool.acquire() == name
    with _connect(database_url, name) as conn:
        conn.execute("INSERT INTO cyclone_sequences (key) VALUES ('first'), ('second')")
        rows = conn.execute("SELECT ctid::text, key FROM cyclone_sequences").fetchall()
    assert rows == [("(0,1)", "first"), ("(0,2)", "second")]


def test_activity_counters_start_from_zero(database_url: str, pool: SchemaPool) -> None:
    """Autovacuum analyzes a table after enough changes: changes of earlier tests must not
    add up in a reused table (a fresh one starts from zero)."""
    name = pool.acquire()
    with _connect(database_url, name) as conn:
        conn.execute(
            "INSERT INTO cyclone_sequences (key) SELECT g::text FROM generate_series(1, 40) g"
        )
    pool.release(name)

    assert pool.acquire() == name
    with _connect(database_url, name) as conn:
        row = conn.execute(
            "SELECT n_mod_since_analyze, n_tup_ins FROM pg_stat_user_tables"
            " WHERE relid = 'cyclone_sequences'::regclass"
        ).fetchone()
    assert row == (0, 0)


def test_a_schema_with_planner_statistics_is_replaced(database_url: str, pool: SchemaPool) -> None:
    name = pool.acquire()
    with _connect(database_url, name) as conn:
        conn.execute("INSERT INTO cyclone_sequences (key) VALUES ('a'), ('b')")
        conn.execute("ANALYZE cyclone_sequences")
    pool.release(name)

    pool.settle()
    assert not _schema_exists(database_url, name)
    assert pool.acquire() != name
    assert pool.counts["replaced (planner statistics)"] == 1


def test_tables_functions_and_triggers_a_test_created_are_dropped(
    database_url: str, pool: SchemaPool
) -> None:
    name = pool.acquire()
    with _connect(database_url, name) as conn:
        baseline = describe_schema(conn, name)
        conn.execute(
            "CREATE TABLE ledger (id bigserial PRIMARY KEY,"
            " run_id uuid REFERENCES cyclone_runs (id))"
        )
        conn.execute("CREATE TYPE mood AS ENUM ('ok')")
        conn.execute("CREATE VIEW steps_view AS SELECT id FROM cyclone_steps")
        conn.execute("CREATE INDEX extra_idx ON cyclone_runs (flow_name)")
        conn.execute(
            "CREATE FUNCTION on_step() RETURNS trigger LANGUAGE plpgsql"
            " AS $$ BEGIN RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER on_step AFTER UPDATE ON cyclone_steps"
            " FOR EACH ROW EXECUTE FUNCTION on_step()"
        )
        conn.execute("CREATE TABLE public.pool_probe (id int)")  # in public: dropped too
    pool.release(name)

    assert pool.acquire() == name
    with _connect(database_url, name) as conn:
        assert describe_schema(conn, name) == baseline
        assert conn.execute("SELECT to_regclass('public.pool_probe')").fetchone() == (None,)
    assert pool.counts["cleaned (schema objects dropped)"] == 1
    assert pool.counts["cleaned (public objects dropped)"] == 1


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE cyclone_runs ADD COLUMN extra int",
        "ALTER TABLE cyclone_steps ALTER COLUMN queue SET DEFAULT 'other'",
        "ALTER TABLE cyclone_steps SET (fillfactor = 50)",
        "ALTER TABLE cyclone_runs DISABLE TRIGGER cyclone_runs_state_change",
        "DROP INDEX cyclone_steps_claim_idx",
        "DELETE FROM cyclone_schema_version WHERE version = 4",
    ],
)
def test_a_schema_the_test_changed_is_replaced(
    database_url: str, pool: SchemaPool, change: str
) -> None:
    name = pool.acquire()
    with _connect(database_url, name) as conn:
        conn.execute(change)
    pool.release(name)

    pool.settle()
    assert not _schema_exists(database_url, name)
    fresh = pool.acquire()
    assert fresh != name
    assert pool.counts["replaced (schema changed)"] == 1 and pool.counts["migrated"] == 2


def test_a_schema_with_a_session_left_open_is_not_reused(
    database_url: str, pool: SchemaPool
) -> None:
    name = pool.acquire()
    leaked = _connect(database_url, name, app_name=pool.app_name)
    try:
        pool.release(name)
        assert pool.counts["discarded (sessions left open)"] == 1
        assert pool.acquire() != name  # a leaked client can never touch a later test's rows
    finally:
        leaked.close()
    pool.close()
    assert not _schema_exists(database_url, name)

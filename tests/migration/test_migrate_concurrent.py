"""Schema migrations against a real Postgres: concurrent ``cyclone-flow migrate`` processes,
idempotence, the outdated-schema error, and the shipped SQL's storage settings."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from helpers.paths import CLI, FLOWS
from helpers.procs import env_without_cyclone
from psycopg import sql

from cyclone_flow import Client
from cyclone_flow.db.migrate import latest_version, migrate, migrations, schema_version
from cyclone_flow.errors import SchemaOutdatedError

HELLO = FLOWS / "hello.yaml"
PROCESSES = 5

# Each process imports the CLI first, then waits for the shared start time, so all five
# enter ``migrate`` within a few milliseconds of each other.
LAUNCHER = """
import sys, time
from cyclone_flow.cli import main
start = float(sys.argv[1])
while time.time() < start:
    time.sleep(0.001)
sys.argv = ["cyclone-flow", *sys.argv[2:]]
main()
"""


def _launch_migrate(database_url: str, schema: str, start: float) -> subprocess.Popen[str]:
    """A ``cyclone-flow migrate`` process that enters the command at ``start``."""
    return subprocess.Popen(
        [
            *(sys.executable, "-c", LAUNCHER, repr(start)),
            *("migrate", "--database-url", database_url, "--schema", schema),
        ],
        env=env_without_cyclone(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def fresh_schema(database_url: str) -> Iterator[str]:
    """A schema name that does not exist yet; dropped after the test."""
    name = f"m_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _versions(conn: psycopg.Connection[Any], schema: str) -> list[tuple[int, str]]:
    q = sql.SQL("SELECT version, name FROM {}.cyclone_schema_version ORDER BY version").format(
        sql.Identifier(schema)
    )
    return [(r[0], r[1]) for r in conn.execute(q).fetchall()]


def test_five_concurrent_migrate_processes(database_url: str, fresh_schema: str) -> None:
    start = time.time() + 3.0
    procs = [_launch_migrate(database_url, fresh_schema, start) for _ in range(PROCESSES)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        results.append((proc.returncode, out, err))
    assert time.time() >= start
    for code, _out, err in results:
        assert code == 0, err
        assert "Traceback" not in err
    applied = [out for _, out, _ in results if out.startswith("applied migrations")]
    up_to_date = [out for _, out, _ in results if "is up to date" in out]
    assert len(applied) == 1, results
    assert len(up_to_date) == PROCESSES - 1, results

    expected = [(m.version, m.name) for m in migrations()]
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert _versions(conn, fresh_schema) == expected
        assert schema_version(conn, fresh_schema) == latest_version()


def test_concurrent_migrate_of_distinct_schemas(database_url: str) -> None:
    names = [f"m_{uuid.uuid4().hex[:12]}" for _ in range(PROCESSES)]
    start = time.time() + 3.0
    try:
        procs = [_launch_migrate(database_url, name, start) for name in names]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            assert out.startswith("applied migrations"), out
        expected = [(m.version, m.name) for m in migrations()]
        with psycopg.connect(database_url, autocommit=True) as conn:
            for name in names:
                assert _versions(conn, name) == expected
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            for name in names:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                )


def test_migrate_twice_is_a_noop(database_url: str, fresh_schema: str) -> None:
    with psycopg.connect(database_url) as conn:
        assert migrate(conn, fresh_schema) == [m.version for m in migrations()]
        before = _versions(conn, fresh_schema)
        conn.commit()
        assert migrate(conn, fresh_schema) == []
        assert _versions(conn, fresh_schema) == before
    proc = subprocess.run(
        [str(CLI), "migrate", "--database-url", database_url, "--schema", fresh_schema],
        env=env_without_cyclone(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"schema {fresh_schema} is up to date" in proc.stdout


def test_client_on_unmigrated_schema_raises(database_url: str, fresh_schema: str) -> None:
    with pytest.raises(SchemaOutdatedError) as info:
        Client(database_url, schema=fresh_schema)
    err = info.value
    assert err.found == 0
    assert err.needed == latest_version()
    # the hint names the schema: a bare `cyclone-flow migrate` would migrate public
    assert f"run `cyclone-flow migrate --schema {fresh_schema}` first" in str(err)
    assert err.exit_code == 1


def test_cli_submit_on_unmigrated_schema_exits_1(database_url: str, fresh_schema: str) -> None:
    proc = subprocess.run(
        [str(CLI), "submit", str(HELLO), "--database-url", database_url, "--schema", fresh_schema],
        env=env_without_cyclone(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "cyclone-flow migrate" in proc.stderr
    assert f"database schema {fresh_schema!r} is at version 0" in proc.stderr
    assert proc.stdout == ""


def test_each_migration_is_safe_to_apply_twice(database_url: str, fresh_schema: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(fresh_schema)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(fresh_schema)))
        for mig in migrations():
            for _ in range(2):
                with conn.transaction():
                    conn.execute(mig.sql.encode("utf-8"))
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (fresh_schema,)
            )
        }
    assert {"cyclone_workflows", "cyclone_runs", "cyclone_steps", "cyclone_deps"} <= tables


def test_the_whole_sequence_is_safe_to_apply_again(database_url: str, fresh_schema: str) -> None:
    """Every migration in order, then every one again: a later migration must not change
    what an earlier one's CREATE OR REPLACE cannot change back (a function's return type:
    0014 adds the inlinable rate log function beside 0013's instead of redefining it)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(fresh_schema)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(fresh_schema)))
        for _ in range(2):
            for mig in migrations():
                with conn.transaction():
                    conn.execute(mig.sql.encode("utf-8"))
        returns = conn.execute(
            "SELECT p.proretset FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s AND p.proname LIKE 'cyclone_rate_log_%%' ORDER BY p.proname",
            (fresh_schema,),
        ).fetchall()
    assert returns == [(False,), (True,)]  # cyclone_rate_log_add (0013), _next (0014)


def test_shipped_tables_fillfactor_and_indexes(database_url: str, schema: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        options = dict(
            conn.execute(
                "SELECT c.relname, c.reloptions FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind = 'r'",
                (schema,),
            ).fetchall()
        )
        claim = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
            (schema, "cyclone_steps_claim_idx"),
        ).fetchone()
        partial = conn.execute(
            "SELECT i.indpred IS NOT NULL FROM pg_index i "
            "WHERE i.indexrelid = to_regclass(format('%%I.cyclone_steps_claim_idx', %s::text))",
            (schema,),
        ).fetchone()
    assert "fillfactor=90" in (options["cyclone_steps"] or [])
    assert "fillfactor=90" in (options["cyclone_runs"] or [])
    assert claim is not None, "the claim index is missing"
    assert "WHERE (state = 'available'::text)" in claim[0]
    assert "(queue, COALESCE(claim_owner, ''::text), priority, scheduled_at, id)" in claim[0]
    assert partial == (True,)

"""Schema migrations (Engine Design: Schema Isolation and Migrations).

Migrations are the numbered plain-SQL files ``NNNN_name.sql`` shipped in ``migrations/``.
Each is written to be safe to apply twice (``IF NOT EXISTS`` everywhere). :func:`migrate`
applies the missing ones in one transaction under a transaction-scoped advisory lock, so
any number of processes may call it at start and each migration is applied exactly once;
``cyclone_schema_version`` records the applied versions. Everything lives in one named
Postgres schema (default ``public``), so several apps or tests can share a database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import psycopg
from psycopg import sql

from cyclone_flow.errors import SchemaOutdatedError
from cyclone_flow.names import validate_schema_name
from cyclone_flow.resources import migrations_dir

_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# Two-key advisory lock: (this constant, hashtext(schema)) serialises migrate per schema.
_LOCK_KEY = 0x0C1C


@dataclass(frozen=True)
class Migration:
    """One migration file: ``version`` from its number, ``name`` from the rest of it."""

    version: int
    name: str
    sql: str


@cache
def migrations() -> tuple[Migration, ...]:
    """Every shipped migration, in version order."""
    found = []
    for entry in migrations_dir().iterdir():
        m = _FILE_RE.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda mig: mig.version)
    return tuple(found)


def latest_version() -> int:
    """The highest version this code ships."""
    return migrations()[-1].version


def migrate(conn: psycopg.Connection[Any], schema: str = "public") -> list[int]:
    """Apply the missing migrations to ``schema``; return the versions applied now.

    ``conn`` must not be inside a transaction; the work commits (or rolls back whole) before
    this returns. Safe to call from many processes at once: an advisory lock serialises
    them and each migration is applied exactly once.
    """
    validate_schema_name(schema)
    ident = sql.Identifier(schema)
    applied_now: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_KEY, schema))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS cyclone_schema_version ("
            " version integer PRIMARY KEY,"
            " name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {row[0] for row in conn.execute("SELECT version FROM cyclone_schema_version")}
        for mig in migrations():
            if mig.version in done:
                continue
            conn.execute(mig.sql.encode("utf-8"))  # several statements: simple protocol
            conn.execute(
                "INSERT INTO cyclone_schema_version (version, name) VALUES (%s, %s)",
                (mig.version, mig.name),
            )
            applied_now.append(mig.version)
    return applied_now


def schema_version(conn: psycopg.Connection[Any], schema: str = "public") -> int:
    """The highest applied version in ``schema``, 0 when it was never migrated."""
    row = conn.execute(
        "SELECT to_regclass(format('%%I.cyclone_schema_version', %s::text)) IS NOT NULL",
        (schema,),
    ).fetchone()
    if not row or not row[0]:
        return 0
    q = sql.SQL("SELECT coalesce(max(version), 0) FROM {}.cyclone_schema_version").format(
        sql.Identifier(schema)
    )
    got = conn.execute(q).fetchone()
    return int(got[0]) if got else 0


def applied_versions(conn: psycopg.Connection[Any], schema: str = "public") -> set[int]:
    """Every version applied to ``schema`` (empty when it was never migrated)."""
    if schema_version(conn, schema) == 0:
        return set()
    q = sql.SQL("SELECT version FROM {}.cyclone_schema_version").format(sql.Identifier(schema))
    return {int(row[0]) for row in conn.execute(q)}


def check_schema_version(conn: psycopg.Connection[Any], schema: str = "public") -> None:
    """Raise :class:`SchemaOutdatedError` when a shipped migration is not applied to
    ``schema``: the highest one, or one below it (migrations developed in parallel land
    in any order; :func:`migrate` applies every missing one)."""
    found = schema_version(conn, schema)
    applied = applied_versions(conn, schema)
    missing = tuple(m.version for m in migrations() if m.version not in applied)
    if found < latest_version() or missing:
        raise SchemaOutdatedError(schema, found, latest_version(), missing)

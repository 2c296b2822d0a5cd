"""Reading the engine's rows, and the ``ledger`` business table of the exactly-once
tests. ``db`` is a connection whose search_path is the test schema (the ``db``
fixture)."""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.rows
from psycopg import sql

LEDGER_DDL = """
CREATE TABLE ledger (
    id      bigserial   PRIMARY KEY,
    run_id  uuid        NOT NULL,
    node    text        NOT NULL,
    tag     text        NOT NULL,
    pid     integer     NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def step_row(db: psycopg.Connection[Any], run_id: str, node: str = "s") -> dict[str, Any]:
    """The ``cyclone_steps`` row of ``(run_id, node)`` as a dict, plus the database's
    ``now()`` as ``db_now``; fails the test when there is none."""
    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    row = cur.execute(
        "SELECT *, now() AS db_now FROM cyclone_steps WHERE run_id = %s AND node = %s",
        (run_id, node),
    ).fetchone()
    assert row is not None, f"no step {node} in run {run_id}"
    return dict(row)


def step_rows(db: psycopg.Connection[Any], run_id: str) -> dict[str, dict[str, Any]]:
    """Every ``cyclone_steps`` row of ``run_id`` as a dict, by node."""
    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    rows = cur.execute("SELECT * FROM cyclone_steps WHERE run_id = %s", (run_id,)).fetchall()
    return {r["node"]: r for r in rows}


def step_columns(
    db: psycopg.Connection[Any], run_id: str, *columns: str
) -> dict[str, tuple[Any, ...]]:
    """``{node: (column, ...)}`` of the steps of ``run_id``, the named columns in order."""
    query = sql.SQL("SELECT node, {} FROM cyclone_steps WHERE run_id = %s").format(
        sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    return {r[0]: tuple(r[1:]) for r in db.execute(query, (run_id,)).fetchall()}


def create_ledger(db: psycopg.Connection[Any]) -> None:
    """Create the ledger table in the schema of ``db`` (its search_path). Deliberately no
    unique key: a duplicate effect must show up as a second row, not a conflict."""
    db.execute(LEDGER_DDL)


def ledger_rows(
    db: psycopg.Connection[Any], run_id: str | None = None
) -> list[tuple[str, str, str, int]]:
    """``(run_id, node, tag, pid)`` of every ledger row (of one run), in insert order."""
    if run_id is None:
        rows = db.execute("SELECT run_id::text, node, tag, pid FROM ledger ORDER BY id")
    else:
        rows = db.execute(
            "SELECT run_id::text, node, tag, pid FROM ledger WHERE run_id = %s ORDER BY id",
            (run_id,),
        )
    return [tuple(r) for r in rows.fetchall()]

"""Handlers for the database-fault tests (tests/integration/test_database_faults.py):
each writes one row into ``<schema>.fault_ledger`` (``UNIQUE (run_id, node)``, plain
``INSERT``: a second effect of a step would fail its attempt, and so its run) through
``ctx.completion_tx()``."""

from __future__ import annotations

import time
from typing import Any

from psycopg import sql

LEDGER_DDL = """
CREATE TABLE fault_ledger (
    run_id  uuid NOT NULL,
    node    text NOT NULL,
    UNIQUE (run_id, node)
)
"""


def ledger(ctx: Any, input: Any) -> Any:
    """Wait ``input["sleep_s"]`` seconds (default 0: handlers are in flight when the
    server restarts), then write the step's ledger row in its completion transaction."""
    time.sleep(float(input.get("sleep_s", 0)))
    conn = ctx.completion_tx()
    conn.execute(
        sql.SQL("INSERT INTO {}.fault_ledger (run_id, node) VALUES (%s, %s)").format(
            sql.Identifier(input["schema"])
        ),
        (ctx.run_id, ctx.node),
    )
    return {"node": ctx.node}


def set_isolation(ctx: Any, input: Any) -> Any:
    """Run ``input["statement"]`` (e.g. ``SET TRANSACTION ISOLATION LEVEL SERIALIZABLE``)
    in the completion transaction, then write the ledger row."""
    conn = ctx.completion_tx()
    conn.execute(input["statement"])
    conn.execute(
        sql.SQL("INSERT INTO {}.fault_ledger (run_id, node) VALUES (%s, %s)").format(
            sql.Identifier(input["schema"])
        ),
        (ctx.run_id, ctx.node),
    )
    return None

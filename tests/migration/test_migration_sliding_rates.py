"""Migration 0013 (limit keys, sliding rate windows): the fixed rate windows of 0011
become sliding logs that never count a claim as made earlier than it was (the limit holds
across the upgrade), the row of a key no step has is dropped, and the migration applies
twice."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from cyclone_flow.db.migrate import migrations


@pytest.fixture
def v12_schema(database_url: str) -> Iterator[str]:
    """A schema with migrations 0001 to 0012 applied (fixed rate windows)."""
    name = f"v12_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(name)))
        for mig in migrations():
            if mig.version <= 12:
                conn.execute(mig.sql.encode())
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def test_0013_turns_fixed_windows_into_sliding_logs(database_url: str, v12_schema: str) -> None:
    sliding = next(m for m in migrations() if m.version == 13)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(v12_schema)))
        wf: Any = conn.execute(
            "INSERT INTO cyclone_workflows (name, digest, definition) VALUES ('f', 'd', '{}')"
            " RETURNING id"
        ).fetchone()
        run: Any = conn.execute(
            "INSERT INTO cyclone_runs (workflow_id, flow_name) VALUES (%s, 'f') RETURNING id", wf
        ).fetchone()
        for node, key, per in (("a", "open", "1 hour"), ("b", "over", "1 minute")):
            conn.execute(
                "INSERT INTO cyclone_steps (run_id, node, state, claim_owner, rate_key,"
                " rate_limit, rate_per) VALUES (%s, %s, 'available', '~limits', %s, 10,"
                " %s::interval)",
                (run[0], node, key, per),
            )
        # 'open': a window of 1h still open (7 claims); 'over': a window of 1 min that
        # ended 2 min ago (4 claims); 'gone': a key no step has any more
        (over_start,) = conn.execute(
            "SELECT date_bin('1 minute', now(), timestamptz 'epoch') - interval '3 min'"
        ).fetchone() or (None,)
        conn.execute(
            "INSERT INTO cyclone_rate_windows (rate_key, window_start, claims) VALUES"
            " ('open', date_bin('1 hour', now(), timestamptz 'epoch'), 7),"
            " ('over', %s, 4), ('gone', now(), 1)",
            (over_start,),
        )
        (before,) = conn.execute("SELECT now()").fetchone() or (None,)
        conn.execute(sliding.sql.encode())
        conn.execute(sliding.sql.encode())  # safe twice
        rows = conn.execute(
            "SELECT rate_key, rate_per, bucket_ends, bucket_claims FROM cyclone_rate_windows"
            " ORDER BY rate_key"
        ).fetchall()
        (after,) = conn.execute("SELECT now()").fetchone() or (None,)
    assert [(k, str(per), claims) for k, per, _, claims in rows] == [
        ("open", "1:00:00", [7]),
        ("over", "0:01:00", [4]),
    ]
    (open_end,), (over_end,) = (ends for _, _, ends, _ in rows)
    assert before < open_end < after  # counted as made at the upgrade: its window was open
    assert over_end == over_start + timedelta(minutes=1)  # counted at its window's end

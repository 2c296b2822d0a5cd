"""Submit: one transaction for definition, run, steps and deps; input validation first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from cyclone_flow import (
    Client,
    InputValidationError,
    PayloadLimits,
    PayloadTooLargeError,
)
from cyclone_flow.flowfile import load_flow_text

FLOW = load_flow_text(
    """
name: submit-test
input_schema:
  type: object
  properties:
    n: {type: integer, default: 3}
  additionalProperties: false
nodes:
  a: {call: "cyclone_test_handlers.basic:echo"}
  b: {call: "cyclone_test_handlers.basic:echo", needs: [a]}
  c: {call: "cyclone_test_handlers.basic:echo", needs: [a, b]}
"""
)


def _counts(db: Any) -> tuple[int, ...]:
    row = db.execute(
        "SELECT (SELECT count(*) FROM cyclone_workflows), (SELECT count(*) FROM cyclone_runs),"
        " (SELECT count(*) FROM cyclone_steps), (SELECT count(*) FROM cyclone_deps)"
    ).fetchone()
    return tuple(row)


def test_submit_writes_rows_and_fills_input_defaults(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    run_id = client.submit(FLOW, None)
    assert client.get_run(run_id).input == {"n": 3}
    states = {s.node: s.state for s in client.list_steps(run_id)}
    assert states == {"a": "available", "b": "pending", "c": "pending"}
    deps = db.execute(
        "SELECT node, depends_on FROM cyclone_deps WHERE run_id = %s ORDER BY 1, 2", (run_id,)
    ).fetchall()
    assert deps == [("b", "a"), ("c", "a"), ("c", "b")]
    client.submit(FLOW, {"n": 5})
    assert _counts(db) == (1, 2, 6, 6)  # the definition is stored once per digest


def test_invalid_or_oversized_input_writes_nothing(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client(payload_limits=PayloadLimits(input_bytes=64))
    with pytest.raises(InputValidationError, match="'x' was unexpected"):
        client.submit(FLOW, {"x": 1})
    with pytest.raises(InputValidationError, match="at n"):
        client.submit(FLOW, {"n": "three"})
    with pytest.raises(PayloadTooLargeError) as info:
        client.submit(load_flow_text("name: big\nnodes:\n  a: {call: 'm:f'}\n"), "x" * 100)
    assert (info.value.size, info.value.limit) == (102, 64)
    assert _counts(db) == (0, 0, 0, 0)


def test_submit_tx_rolls_back_with_the_caller(
    make_client: Callable[..., Client], database_url: str, schema: str, db: Any
) -> None:
    client = make_client()
    with psycopg.connect(database_url) as conn:
        run_id = client.submit_tx(conn, FLOW, {"n": 1})
        conn.rollback()
    assert _counts(db) == (0, 0, 0, 0)
    with psycopg.connect(database_url) as conn:
        run_id = client.submit_tx(conn, FLOW, {"n": 1})
        conn.commit()
    assert client.get_run(run_id).state == "running"

"""Bulk submission (``Client.submit_many`` / ``enqueue_many`` and their ``_tx`` forms):
ids in input order, unique keys inside a batch and against existing runs, a bad item in
the middle (its index in the error, nothing of its chunk written, earlier chunks
committed), payload limits, a rolled-back ``_tx`` form writing nothing, one wakeup
notification per chunk, and the set-based rows equal to those of single submissions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from helpers.procs import wait_until

from cyclone_flow import BatchItemError, Client, PayloadLimits, SubmitOptionError
from cyclone_flow.errors import InputValidationError, PayloadTooLargeError
from cyclone_flow.flowfile import load_flow_text

NOOP = "cyclone_test_handlers.queueing:noop"
CHAIN = load_flow_text(
    f"""
name: bulk-chain
input_schema:
  type: object
  properties:
    n: {{type: integer}}
    tag: {{type: string, default: none}}
  required: [n]
nodes:
  a: {{call: "{NOOP}"}}
  b: {{call: "{NOOP}", needs: [a]}}
  c: {{call: "{NOOP}", needs: [b], queue: own, priority: 7}}
"""
)
SIGNAL_ROOT = load_flow_text(
    f"""
name: bulk-signal-root
nodes:
  gate: {{type: wait_signal, signal: go}}
  after: {{call: "{NOOP}", needs: [gate]}}
"""
)


def _count(db: Any, table: str) -> int:
    return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def _inputs(db: Any, ids: list[str]) -> list[Any]:
    rows = dict(db.execute("SELECT id::text, input FROM cyclone_runs").fetchall())
    return [rows[i] for i in ids]


def test_ids_come_back_in_input_order_with_steps_and_deps_from_the_plan(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    ids = client.submit_many(CHAIN, [{"n": i} for i in range(7)], chunk_size=3)
    assert len(ids) == len(set(ids)) == 7
    assert not any(r.duplicate for r in ids)
    assert _inputs(db, ids) == [{"n": i, "tag": "none"} for i in range(7)]
    assert _count(db, "cyclone_steps") == 21 and _count(db, "cyclone_deps") == 14
    bulk = db.execute(
        "SELECT node, state, queue, priority, max_attempts FROM cyclone_steps "
        "WHERE run_id = %s ORDER BY id",
        (ids[3],),
    ).fetchall()
    single = client.submit(CHAIN, {"n": 99})
    one = db.execute(
        "SELECT node, state, queue, priority, max_attempts FROM cyclone_steps "
        "WHERE run_id = %s ORDER BY id",
        (single,),
    ).fetchall()
    assert bulk == one
    assert [r[:2] for r in bulk] == [("a", "available"), ("b", "pending"), ("c", "pending")]
    cols = "flow_name, state, deadline, output_limit, max_signal_wait, unique_states"
    row_bulk = db.execute(f"SELECT {cols} FROM cyclone_runs WHERE id = %s", (ids[0],)).fetchone()
    row_one = db.execute(f"SELECT {cols} FROM cyclone_runs WHERE id = %s", (single,)).fetchone()
    assert row_bulk == row_one
    assert _count(db, "cyclone_workflows") == 1


def test_enqueue_many_jobs_run_to_completion_in_order(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client(worker_queues={"default": 4})
    ids = client.enqueue_many(NOOP, [{"i": i} for i in range(25)], chunk_size=10, retry=3)
    assert _inputs(db, ids) == [{"i": i} for i in range(25)]
    assert db.execute("SELECT DISTINCT max_attempts FROM cyclone_steps").fetchall() == [(3,)]
    client.start()
    wait_until(lambda: _count(db, "cyclone_runs WHERE state = 'completed'") == 25, timeout=20)


def test_unique_keys_duplicate_inside_the_batch_and_against_existing_runs(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    existing = client.submit(CHAIN, {"n": 0}, unique_key="k-old")
    ids = client.submit_many(
        CHAIN,
        [{"n": i} for i in range(5)],
        item_options=[
            {"unique_key": "k-old"},
            {"unique_key": "k-new"},
            None,
            {"unique_key": "k-new"},
            {},
        ],
    )
    assert ids[0] == existing and ids[0].duplicate
    assert not ids[1].duplicate and ids[3] == ids[1] and ids[3].duplicate
    assert not ids[2].duplicate and not ids[4].duplicate
    assert len({ids[1], ids[2], ids[4], existing}) == 4
    assert _count(db, "cyclone_runs") == 4
    assert _count(db, "cyclone_steps") == 12


def test_a_bad_item_names_its_index_and_nothing_of_its_chunk_is_written(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    inputs: list[Any] = [{"n": i} for i in range(8)]
    inputs[4] = {"n": "four"}  # the second chunk (3..5) holds it
    with pytest.raises(BatchItemError) as info:
        client.submit_many(CHAIN, inputs, chunk_size=3)
    assert info.value.index == 4 and info.value.committed == 3
    assert isinstance(info.value.error, InputValidationError)
    assert isinstance(info.value.__cause__, InputValidationError)
    assert "item 4" in str(info.value) and "'four'" in str(info.value)
    assert sorted(r["n"] for r in _inputs(db, _all_ids(db))) == [0, 1, 2]
    assert _count(db, "cyclone_steps") == 9


def test_a_bad_item_option_names_its_index(make_client: Callable[..., Client], db: Any) -> None:
    client = make_client()
    with pytest.raises(BatchItemError) as info:
        client.enqueue_many(NOOP, [1, 2, 3], item_options=[None, {"priority": "high"}, None])
    assert info.value.index == 1 and isinstance(info.value.error, SubmitOptionError)
    with pytest.raises(BatchItemError) as info:
        client.enqueue_many(NOOP, [1, 2], item_options=[None, {"retry": 3}])
    assert info.value.index == 1 and "whole batch" in str(info.value)
    with pytest.raises(SubmitOptionError, match="one mapping"):
        client.enqueue_many(NOOP, [1, 2, 3], item_options=[None, None])
    with pytest.raises(SubmitOptionError, match="chunk_size"):
        client.enqueue_many(NOOP, [1], chunk_size=0)
    # the mismatch is told when the shorter list ends, before its chunk is written
    assert _count(db, "cyclone_runs") == 0


def test_payload_limit_per_item(make_client: Callable[..., Client], db: Any) -> None:
    client = make_client(payload_limits=PayloadLimits(input_bytes=64))
    with pytest.raises(BatchItemError) as info:
        client.enqueue_many(NOOP, ["ok", "x" * 100, "ok"])
    assert info.value.index == 1 and isinstance(info.value.error, PayloadTooLargeError)
    assert info.value.committed == 0
    assert _count(db, "cyclone_runs") == 0


def test_rolled_back_tx_form_writes_nothing(
    make_client: Callable[..., Client], database_url: str, schema: str, db: Any
) -> None:
    client = make_client()
    with (
        psycopg.connect(database_url, options=f"-c search_path={schema}") as conn,
        conn.transaction(),
    ):
        ids = client.submit_many_tx(conn, CHAIN, [{"n": i} for i in range(5)], chunk_size=2)
        got = client.enqueue_many_tx(conn, NOOP, [1, 2, 3])
        assert len(ids) == 5 and len(got) == 3
        raise psycopg.Rollback()  # the caller rolls back
    for table in ("cyclone_runs", "cyclone_steps", "cyclone_deps", "cyclone_workflows"):
        assert _count(db, table) == 0, table
    # the definition stored in the rolled-back transaction was not remembered as stored
    ids = client.submit_many(CHAIN, [{"n": 1}])
    assert _count(db, "cyclone_runs") == 1 and _count(db, "cyclone_steps") == 3


def test_tx_form_commits_with_the_caller(
    make_client: Callable[..., Client], database_url: str, schema: str, db: Any
) -> None:
    client = make_client()
    with (
        psycopg.connect(database_url, options=f"-c search_path={schema}") as conn,
        conn.transaction(),
    ):
        ids = client.submit_many_tx(conn, CHAIN, [{"n": i} for i in range(4)], chunk_size=3)
        assert _count(db, "cyclone_runs") == 0  # not committed yet
    assert _inputs(db, ids) == [{"n": i, "tag": "none"} for i in range(4)]


def test_wakeups_are_published_once_per_chunk(make_client: Callable[..., Client]) -> None:
    client = make_client()
    before = client.publisher.batches
    client.submit_many(CHAIN, [{"n": i} for i in range(7)], chunk_size=3)
    assert client.publisher.batches - before == 3  # three chunks, one notification each
    # a delayed batch has nothing claimable now: nothing is published
    client.enqueue_many(NOOP, [1, 2], delay=60)
    assert client.publisher.batches - before == 3


def test_per_item_queue_priority_delay_and_sequence(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    at = datetime.now(UTC) + timedelta(hours=1)
    ids = client.submit_many(
        CHAIN,
        [{"n": i} for i in range(5)],
        queue="bulk",
        item_options=[
            {"priority": -3},
            {"queue": "other", "delay": "1h"},
            {"run_at": at},
            {"sequence": "s"},
            {"sequence": "s"},
        ],
    )

    def step(run_id: str, node: str) -> tuple[Any, ...]:
        return db.execute(
            "SELECT queue, priority, state, scheduled_at > now() + interval '30 minutes' "
            "FROM cyclone_steps WHERE run_id = %s AND node = %s",
            (run_id, node),
        ).fetchone()

    assert step(ids[0], "a") == ("bulk", -3, "available", False)
    assert step(ids[0], "c") == ("own", 7, "pending", False)  # the node's own queue wins
    assert step(ids[1], "a") == ("other", 0, "available", True)
    assert step(ids[2], "a")[3] is True
    held = dict(
        db.execute(
            "SELECT id::text, sequence_held FROM cyclone_runs WHERE sequence_key = 's'"
        ).fetchall()
    )
    assert held == {ids[3]: False, ids[4]: True}
    assert step(ids[4], "a")[2] == "pending"


def test_flows_whose_roots_are_not_actions_start_them(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    ids = client.submit_many(SIGNAL_ROOT, [None, None, None])
    states = db.execute("SELECT DISTINCT node, state FROM cyclone_steps ORDER BY node").fetchall()
    assert states == [("after", "pending"), ("gate", "waiting")]
    assert client.signal(ids[1], "go") is not None


def test_a_definition_gone_under_a_live_client_is_stored_again(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    client.submit(CHAIN, {"n": 1})  # four definitions, each remembered
    client.enqueue(NOOP, 1)
    client.enqueue(NOOP, 1, retry=2)
    client.enqueue(NOOP, 1, retry=3)
    db.execute("TRUNCATE cyclone_workflows CASCADE")  # the schema emptied: ids remembered
    assert _count(db, "cyclone_runs") == 0
    # each path meets its remembered, now missing, definition first
    client.enqueue_many(NOOP, [4, 5])  # set-based chunk
    client.submit_many(CHAIN, [{"n": 3}], item_options=[{"sequence": "q"}])  # per-run item
    client.enqueue(NOOP, 2, retry=2)  # the one-statement single submission
    client.enqueue(NOOP, 3, retry=3, unique_key="u")  # a single one with a unique key
    assert _count(db, "cyclone_runs") == 5
    assert _count(db, "cyclone_steps") == 2 + 3 + 1 + 1
    assert _count(db, "cyclone_workflows") == 4


def _all_ids(db: Any) -> list[str]:
    return [r[0] for r in db.execute("SELECT id::text FROM cyclone_runs").fetchall()]


def test_a_remembered_definition_writes_the_same_rows_in_one_statement(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    first = client.enqueue(NOOP, {"i": 1}, retry=2, priority=5, queue="q1")  # stores it
    again = client.enqueue(NOOP, {"i": 2}, retry=2, priority=5, queue="q1")  # remembered
    cols = (
        "node, type, call, state, queue, priority, max_attempts, backoff, on_dep_failure, "
        "timeout, input, claim_owner, root_run_id"
    )
    rows = [
        db.execute(f"SELECT {cols} FROM cyclone_steps WHERE run_id = %s", (r,)).fetchall()
        for r in (first, again)
    ]
    assert rows[0] == rows[1] and len(rows[0]) == 1
    run_cols = "workflow_id, flow_name, state, deadline, output_limit, unique_states, owner"
    runs = [
        db.execute(f"SELECT {run_cols} FROM cyclone_runs WHERE id = %s", (r,)).fetchone()
        for r in (first, again)
    ]
    assert runs[0] == runs[1]
    late = client.enqueue(NOOP, {"i": 3}, retry=2, delay=3600)
    assert db.execute(
        "SELECT scheduled_at > now() + interval '50 minutes' FROM cyclone_steps WHERE run_id = %s",
        (late,),
    ).fetchone() == (True,)
    assert _count(db, "cyclone_workflows") == 1

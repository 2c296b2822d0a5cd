"""Queues and priority, delayed runs, standalone jobs (seeds: Queues and Priority; Engine
Design: The Claiming Algorithm). Every ordering and timing claim is read back from the
database's timestamps."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cyclone_test_handlers import queueing
from cyclone_test_handlers.engine import event
from helpers.engine import database
from helpers.procs import wait_until
from helpers.rows import step_columns
from psycopg_pool import ConnectionPool

from cyclone_flow import Client, SubmitOptionError
from cyclone_flow.flowfile import load_flow_text

NOOP = "cyclone_test_handlers.queueing:noop"

FLOW = load_flow_text(
    """
name: prio
defaults: {queue: base, priority: 5}
nodes:
  a: {call: "cyclone_test_handlers.queueing:noop"}
  pinned: {call: "cyclone_test_handlers.queueing:noop", queue: gpu, priority: -1}
  b: {call: "cyclone_test_handlers.queueing:noop", needs: [a]}
"""
)


def test_submission_overrides_nodes_without_their_own(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    plain = client.submit(FLOW)
    assert step_columns(db, plain, "queue", "priority") == {
        "a": ("base", 5),
        "pinned": ("gpu", -1),
        "b": ("base", 5),
    }
    over = client.submit(FLOW, queue="urgent", priority=-7)
    # a node's own queue/priority wins over the submission, which wins over defaults
    assert step_columns(db, over, "queue", "priority") == {
        "a": ("urgent", -7),
        "pinned": ("gpu", -1),
        "b": ("urgent", -7),
    }
    # overrides belong to the run: one stored definition
    assert db.execute("SELECT count(*) FROM cyclone_workflows").fetchone() == (1,)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"queue": "Bad Queue"}, "queue="),
        ({"queue": "x'; DROP TABLE cyclone_runs; --"}, "queue name"),
        ({"priority": 40000}, "priority="),
        ({"priority": True}, "priority="),
        ({"delay": -1}, "delay="),
        ({"delay": "soon"}, "delay="),
        ({"run_at": datetime(2030, 1, 1)}, "naive datetime"),
        ({"run_at": datetime(2030, 1, 1, tzinfo=UTC), "delay": 5}, "not both"),
        ({"unique_window": 60}, "needs a unique_key"),
        ({"unique_key": "k", "unique_states": ["completed"]}, "must include 'running'"),
        ({"unique_key": "k", "unique_states": ["done"]}, "unknown run state"),
        ({"unique_key": ""}, "unique_key="),
        ({"sequence": "a\x00b"}, "NUL"),
    ],
)
def test_bad_submission_options_raise_and_write_nothing(
    make_client: Callable[..., Client], db: Any, options: dict[str, Any], needle: str
) -> None:
    client = make_client()
    with pytest.raises(SubmitOptionError, match=needle) as info:
        client.submit(FLOW, **options)
    assert info.value.exit_code == 2
    with pytest.raises(SubmitOptionError):
        client.enqueue(NOOP, **options)
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone() == (0,)


@pytest.mark.parametrize(
    ("call", "options", "needle"),
    [
        ("not a callable", {}, "callable="),
        ("os:system; rm", {}, "callable="),
        (NOOP, {"retry": 0}, "max_attempts"),
        (NOOP, {"retry": {"max_attempts": 2, "backof": {}}}, "unknown key"),
        (NOOP, {"retry": {"backoff": {"initial": "1m", "max": "1s"}}}, "initial is above max"),
        (NOOP, {"timeout": 0}, "timeout="),
    ],
)
def test_bad_job_options_raise(
    make_client: Callable[..., Client], call: str, options: dict[str, Any], needle: str
) -> None:
    with pytest.raises(SubmitOptionError, match=needle):
        make_client().enqueue(call, None, **options)


def test_claims_follow_priority_then_age(make_client: Callable[..., Client], db: Any) -> None:
    producer = make_client()
    submitted = [
        ("p5-first", 5),
        ("p1-first", 1),
        ("p9", 9),
        ("p1-second", 1),
        ("p-3", -3),
        ("p5-second", 5),
    ]
    ids = {
        producer.enqueue(NOOP, {"tag": tag}, queue="ordered", priority=p): tag
        for tag, p in submitted
    }
    worker = make_client(worker_queues={"ordered": 1})
    worker.start()
    wait_until(
        lambda: db.execute(
            "SELECT count(*) = 6 FROM cyclone_runs WHERE state = 'completed'"
        ).fetchone()[0],
        what="all six jobs",
    )
    order = [
        ids[str(r[0])]
        for r in db.execute("SELECT run_id FROM cyclone_steps ORDER BY started_at, id").fetchall()
    ]
    assert order == ["p-3", "p1-first", "p1-second", "p5-first", "p5-second", "p9"]


def test_per_queue_worker_counts_are_respected(make_client: Callable[..., Client], db: Any) -> None:
    key = uuid.uuid4().hex
    producer = make_client()
    for queue_name, count in (("a", 3), ("b", 6)):
        for _ in range(count):
            producer.enqueue(
                "cyclone_test_handlers.queueing:block_counted",
                {"key": key, "queue": queue_name},
                queue=queue_name,
            )
    worker = make_client(worker_queues={"a": 1, "b": 3})
    worker.start()

    def running() -> dict[str, int]:
        rows = db.execute(
            "SELECT queue, count(*) FROM cyclone_steps WHERE state = 'running' GROUP BY queue"
        ).fetchall()
        return {"a": 0, "b": 0, **{r[0]: r[1] for r in rows}}

    # every handler blocks until released: the queues fill up to their worker counts
    wait_until(lambda: running() == {"a": 1, "b": 3}, what="a=1 and b=3 running")
    for _ in range(20):
        assert running() == {"a": 1, "b": 3}
    event(key, "go").set()
    wait_until(
        lambda: db.execute(
            "SELECT count(*) = 9 FROM cyclone_runs WHERE state = 'completed'"
        ).fetchone()[0],
        what="all nine jobs",
    )
    # handler concurrency never passed the counts (a finished handler's step may still be
    # 'running' in the database while the completer commits it: its slot is already free)
    assert {q: queueing.PEAKS[(key, q)] for q in ("a", "b")} == {"a": 1, "b": 3}


def test_delayed_runs_are_not_claimed_early(make_client: Callable[..., Client], db: Any) -> None:
    producer = make_client()
    db_now = db.execute("SELECT now()").fetchone()[0]
    by_delay = producer.enqueue(NOOP, {"x": 1}, delay=1.0)
    by_run_at = producer.submit(FLOW, run_at=db_now + timedelta(seconds=1.5), queue="base")
    by_cli_string = producer.enqueue(NOOP, None, delay="1s")
    client = make_client(worker_queues={"default": 2, "base": 2, "gpu": 1})
    client.start()

    def early_claims() -> int:
        # a step is never running or done before its scheduled_at (one statement, one now())
        row = db.execute(
            "SELECT count(*) FILTER (WHERE now() < scheduled_at AND state <> 'available'"
            " AND state <> 'pending'), count(*) FILTER (WHERE state <> 'completed')"
            " FROM cyclone_steps"
        ).fetchone()
        assert row[0] == 0
        return int(row[1])

    wait_until(lambda: early_claims() == 0, what="every step completed")
    rows = db.execute(
        "SELECT s.run_id::text, s.node, s.scheduled_at, s.started_at, r.created_at"
        " FROM cyclone_steps s JOIN cyclone_runs r ON r.id = s.run_id"
    ).fetchall()
    roots = {(r[0], r[1]): r for r in rows}
    for run_id, node, delay in ((by_delay, "job", 1.0), (by_cli_string, "job", 1.0)):
        _, _, scheduled_at, started_at, created_at = roots[(run_id, node)]
        assert scheduled_at - created_at >= timedelta(seconds=delay)
        assert started_at >= scheduled_at
    for node in ("a", "pinned"):
        _, _, scheduled_at, started_at, _ = roots[(by_run_at, node)]
        assert scheduled_at == db_now + timedelta(seconds=1.5)
        assert started_at >= scheduled_at


def test_enqueue_runs_a_one_node_job_with_retries(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    key = uuid.uuid4().hex
    job = client.enqueue(
        "cyclone_test_handlers.queueing:fail_until_ok",
        {"key": key},
        retry={"max_attempts": 5, "backoff": {"initial": "10ms", "max": "20ms"}},
        timeout=30,
    )
    again = client.enqueue(
        "cyclone_test_handlers.queueing:fail_until_ok",
        {"key": key},
        retry={"max_attempts": 5, "backoff": {"initial": "10ms", "max": "20ms"}},
        timeout=30,
    )
    # jobs are content-addressed definitions like flows: one stored for both
    assert db.execute("SELECT count(*) FROM cyclone_workflows").fetchone() == (1,)
    run = client.get_run(job)
    assert run.flow_name == "cyclone_test_handlers.queueing:fail_until_ok"
    (step,) = client.list_steps(job)
    assert (step.node, step.max_attempts, step.queue) == ("job", 5, "default")
    client.start()
    wait_until(lambda: client.list_steps(job)[0].attempt >= 2, what="a failed first attempt")
    event(key, "ok").set()
    assert client.wait(job, timeout=10).state == "completed"
    assert client.wait(again, timeout=10).state == "completed"
    assert client.get_run(job).output == {"job": {"run": job}}


def test_jobs_obey_the_worker_allow_list(make_client: Callable[..., Client]) -> None:
    client = make_client(allow_modules=["cyclone_test_handlers.basic"])
    job = client.enqueue(NOOP, {"x": 1})
    client.start()
    # given back, not failed: a call outside the allow-list is this worker's configuration
    # (docs/failures.md); it waits for a worker that may run it
    step = wait_until(
        lambda: next((s for s in client.list_steps(job) if s.import_wait_reason is not None), None),
        what="the step given back",
    )
    assert "not allowed" in step.import_wait_reason and step.attempt == 1, step
    assert client.get_run(job).state == "running" and step.error_kind is None


def test_a_producer_only_client_starts_no_thread(
    make_client: Callable[..., Client], database_url: str, schema: str, db: Any
) -> None:
    pool: ConnectionPool[Any] = ConnectionPool(database_url, min_size=1, max_size=8, open=True)
    try:
        before = set(threading.enumerate())
        producer = Client(pool, schema=schema, workers=1)
        producer.submit(FLOW, queue="base")
        producer.enqueue(NOOP, {"x": 1}, delay=5, unique_key="k", sequence="s")
        with pool.connection() as conn:
            producer.enqueue_tx(conn, NOOP, {"x": 2})
        producer.shutdown()
        assert set(threading.enumerate()) == before
    finally:
        pool.close()
    # with a URL the client owns a pool: only that pool's own threads appear, none of ours
    before = set(threading.enumerate())
    client = make_client()
    client.enqueue(NOOP, {"x": 3})
    new = set(threading.enumerate()) - before
    assert new and all(t.name.startswith(f"{database(client).pool.name}-") for t in new), new
    assert client.runtime is None
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone() == (4,)

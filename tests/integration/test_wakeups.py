"""Wakeups (Engine Design: LISTEN/NOTIFY and the Polling Floor; Client Options:
Notifications, WithNotify, WithNotifyCoalesce, "Producer-only clients must be shut down").

Notifications are observed on a separate LISTEN connection of the test. To prove that
nothing was published, the test sends its own sentinel notification afterwards: Postgres
delivers notifications in commit order, so anything published before the sentinel arrives
first."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from cyclone_test_handlers import engine
from helpers.engine import drop_wakeups
from helpers.flows import step_flow
from helpers.procs import wait_until
from helpers.rows import create_ledger, step_row
from psycopg_pool import ConnectionPool

from cyclone_flow import Client, RunNotFoundError, TransactionOpenError, WaitTimeoutError
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.notify import Listener, Publisher, Wakeups

Conn = psycopg.Connection[Any]


def _flow(queue: str = "default", call: str = "cyclone_test_handlers.basic:echo") -> Any:
    return step_flow(call, name=f"wake-{queue}", queue=queue)


@pytest.fixture
def listen(database_url: str) -> Iterator[Conn]:
    """A test-owned connection LISTENing on both wakeup channels."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("LISTEN cyclone_available")
        conn.execute("LISTEN cyclone_run_done")
        yield conn


def _ours(note: Any, schema: str) -> dict[str, Any] | None:
    try:
        data = json.loads(note.payload)
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("schema") == schema else None


def published_so_far(
    listen: Conn, database_url: str, schema: str, channel: str | None = None
) -> list[tuple[str, Any]]:
    """Every notification of ``schema`` (on ``channel`` when given) published before now,
    as ``(channel, payload)``."""
    token = uuid.uuid4().hex
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_notify('cyclone_available', %s)", (json.dumps({"t": token}),))
    out = []
    for note in listen.notifies(timeout=10):
        if token in note.payload:
            return out
        data = _ours(note, schema)
        if data is not None and channel in (None, note.channel):
            out.append((note.channel, data))
    raise AssertionError("the sentinel notification never arrived")


def next_notifications(listen: Conn, schema: str, count: int) -> list[tuple[str, Any]]:
    """The next ``count`` notifications of ``schema`` (fails after 10 s)."""
    out: list[tuple[str, Any]] = []
    deadline = time.monotonic() + 10
    while len(out) < count and time.monotonic() < deadline:
        for note in listen.notifies(timeout=max(0.0, deadline - time.monotonic())):
            data = _ours(note, schema)
            if data is not None:
                out.append((note.channel, data))
                if len(out) == count:
                    break
    assert len(out) == count, f"got {out}, expected {count} notifications"
    return out


def _claim_delay(db: Conn, run_id: str) -> float | None:
    """Seconds from the run's creation to the claim of its step (database clock), or None
    while unclaimed."""
    row = db.execute(
        "SELECT extract(epoch FROM s.started_at - r.created_at) FROM cyclone_steps s "
        "JOIN cyclone_runs r ON r.id = s.run_id WHERE s.run_id = %s",
        (run_id,),
    ).fetchone()
    return None if row is None or row[0] is None else float(row[0])


# --- publication --------------------------------------------------------------------------


def test_submit_publishes_one_notification_naming_every_root_queue(
    make_client, listen, database_url, schema
) -> None:
    producer = make_client()
    flow = load_flow_text(
        """
name: two-roots
nodes:
  a: {call: "m:f", queue: alpha}
  b: {call: "m:f", queue: beta}
  c: {call: "m:f", queue: gamma, needs: [a]}
"""
    )
    producer.submit(flow)
    assert published_so_far(listen, database_url, schema) == [
        ("cyclone_available", {"schema": schema, "queues": ["alpha", "beta"]})
    ]
    assert (producer.publisher.notifications, producer.publisher.batches) == (1, 1)


def test_run_completion_publishes_run_done(make_client, listen, database_url, schema) -> None:
    client = make_client(workers=1)
    client.start()
    run_id = client.submit(_flow(), {"x": 1})
    assert client.wait(run_id, timeout=20).state == "completed"
    published = published_so_far(listen, database_url, schema)
    assert ("cyclone_run_done", {"schema": schema, "run_ids": [run_id]}) in published


def test_lost_wakeup_is_claimed_by_polling_within_poll_max(
    make_client, listen, db, database_url, schema
) -> None:
    poll_max = 0.3
    worker = make_client(workers=1, poll_interval=(0.05, poll_max))
    worker.start()
    assert worker.runtime is not None
    producer = make_client()
    drop_wakeups(producer)  # every NOTIFY of the producer is lost
    for _ in range(3):
        # let the idle claim loop back off to its longest sleep (0.05 doubling to 0.3 s)
        polls = worker.runtime.claim_queries + 6
        wait_until(lambda p=polls: worker.runtime.claim_queries >= p, 10, what="idle polls")
        run_id = producer.submit(_flow())
        delay = wait_until(lambda r=run_id: _claim_delay(db, r), 10, what="the claim")
        assert delay < poll_max + 0.2, f"claimed {delay:.3f}s after the commit"
        assert worker.wait(run_id, timeout=10).state == "completed"
    assert published_so_far(listen, database_url, schema, "cyclone_available") == []
    assert worker.runtime.wakeups_forwarded == 0  # every claim came from a poll


def test_notify_disabled_client_claims_by_polling_and_still_publishes(
    make_client, listen, database_url, schema
) -> None:
    client = make_client(workers=1, notify=False, poll_interval=(0.02, 0.2))
    client.start()
    run_id = client.submit(_flow(), {"x": 2})
    status = client.wait(run_id, timeout=20)  # polls: no listener
    assert status.state == "completed"
    assert client.listener is None
    assert not [t for t in threading.enumerate() if t.name == Listener.THREAD_NAME]
    published = published_so_far(listen, database_url, schema)
    assert ("cyclone_available", {"schema": schema, "queues": ["default"]}) in published
    assert ("cyclone_run_done", {"schema": schema, "run_ids": [run_id]}) in published


def test_worker_forwards_only_wakeups_of_queues_it_serves(make_client, db) -> None:
    worker = make_client(worker_queues={"alpha": 1}, poll_interval=(30.0, 30.0))
    worker.start()
    assert worker.listener is not None and worker.runtime is not None
    wait_until(worker.listener.ready.is_set, 10, what="the listener")
    producer = make_client()
    others = [producer.submit(_flow("beta")) for _ in range(3)]
    wait_until(lambda: worker.runtime.wakeups_ignored >= 3, 10, what="3 ignored wakeups")
    assert worker.runtime.wakeups_forwarded == 0  # no claim is attempted for them
    mine = producer.submit(_flow("alpha"))
    delay = wait_until(lambda: _claim_delay(db, mine), 10, what="the claim")
    assert delay < 5.0  # the poll interval is 30 s: the wakeup woke the claim loop
    assert worker.runtime.wakeups_forwarded == 1
    assert [step_row(db, rid)["state"] for rid in others] == ["available"] * 3


def test_listener_reconnects_after_pg_terminate_backend(make_client, db, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="cyclone_flow")
    worker = make_client(workers=1, poll_interval=(30.0, 30.0))
    worker.start()
    listener = worker.listener
    assert listener is not None
    wait_until(listener.ready.is_set, 10, what="the listener")
    old_pid = listener.backend_pid
    db.execute("SELECT pg_terminate_backend(%s)", (old_pid,))
    wait_until(
        lambda: listener.ready.is_set() and listener.backend_pid not in (None, old_pid),
        10,
        what="the listener to reconnect",
    )
    assert listener.connects == 2
    assert "listener connection lost" in caplog.text
    run_id = make_client().submit(_flow())
    delay = wait_until(lambda: _claim_delay(db, run_id), 10, what="the claim")
    assert delay < 5.0  # the poll interval is 30 s: the new LISTEN woke the claim loop
    assert worker.runtime is not None and worker.runtime.wakeups_forwarded == 1


# --- coalescing ---------------------------------------------------------------------------


def test_producer_without_window_starts_no_thread(make_client) -> None:
    before = set(threading.enumerate())
    producer = make_client()
    for _ in range(3):
        producer.submit(_flow())
    names = {t.name for t in set(threading.enumerate()) - before}
    assert Publisher.THREAD_NAME not in names
    assert Listener.THREAD_NAME not in names
    assert producer.publisher.thread is None and producer.listener is None


def test_coalescing_batches_wakeups_and_shutdown_flushes_producer_only_client(
    make_client, listen, schema
) -> None:
    window = 30.0  # far longer than the test: only shutdown() can flush the buffer
    producer = make_client(notify=False, notify_coalesce=window)
    queues = [f"q{i}" for i in range(10)]
    started = time.monotonic()
    for queue in queues:
        producer.submit(_flow(queue))
    # an idle publisher sends the first wakeup inline, without waiting for the window
    assert next_notifications(listen, schema, 1) == [
        ("cyclone_available", {"schema": schema, "queues": ["q0"]})
    ]
    assert producer.publisher.thread is not None  # the other nine are buffered
    producer.shutdown()  # never started: a producer-only client
    assert time.monotonic() - started < window / 2  # flushed at once, not at window end
    assert next_notifications(listen, schema, 1) == [
        ("cyclone_available", {"schema": schema, "queues": queues[1:]})
    ]
    assert (producer.publisher.notifications, producer.publisher.batches) == (2, 2)
    assert not producer.publisher.thread.is_alive()


def test_coalescing_window_publishes_without_shutdown(make_client, listen, schema) -> None:
    producer = make_client(notify=False, notify_coalesce=1.0)
    producer.submit(_flow("q0"))
    producer.submit(_flow("q1"))
    producer.submit(_flow("q2"))
    got = next_notifications(listen, schema, 2)  # the timer flushes the window's batch
    assert got == [
        ("cyclone_available", {"schema": schema, "queues": ["q0"]}),
        ("cyclone_available", {"schema": schema, "queues": ["q1", "q2"]}),
    ]


def test_coalescing_loses_nothing_under_concurrent_publishers(make_client, listen, schema) -> None:
    producer = make_client(notify=False, notify_coalesce=0.05)
    names = [f"q{t}-{i}" for t in range(4) for i in range(25)]

    def publish(thread: int) -> None:
        for i in range(25):
            producer.publisher.publish(Wakeups(queues={f"q{thread}-{i}"}))

    threads = [threading.Thread(target=publish, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    producer.shutdown()
    seen: list[str] = []
    notes = 0
    deadline = time.monotonic() + 10
    while len(seen) < len(names) and time.monotonic() < deadline:
        for note in listen.notifies(timeout=1, stop_after=1):
            data = _ours(note, schema)
            if data is not None:
                notes += 1
                seen.extend(data["queues"])
    assert sorted(seen) == sorted(names)  # every wakeup published exactly once
    assert notes == producer.publisher.notifications < len(names)


# --- publication failures -----------------------------------------------------------------


def test_failed_publication_is_logged_and_polling_claims_the_work(
    make_client, database_url, schema, db, caplog
) -> None:
    logger = logging.getLogger("cyclone_test.publisher")
    caplog.set_level(logging.WARNING, logger="cyclone_test.publisher")
    app = f"victim-{uuid.uuid4().hex[:8]}"
    pool: ConnectionPool[Any] = ConnectionPool(
        database_url, min_size=2, max_size=8, kwargs={"application_name": app}, open=True
    )
    worker = make_client(workers=1, poll_interval=(0.05, 0.3))
    worker.start()
    producer = Client(pool, schema=schema, tx_slots=2, logger=logger)
    try:
        with psycopg.connect(database_url) as conn:
            producer.track_wakeups(conn)
            run_id = producer.submit_tx(conn, _flow())
            conn.commit()
            pool.wait()
            killed = db.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (app,),
            ).fetchone()
            assert killed is not None and killed[0] >= 1
            producer.publish_wakeups(conn)  # its pool connection is dead: it fails
        assert producer.publisher.failures == 1
        # a connection-level failure: one warning line, no traceback
        errors = [r for r in caplog.records if "could not publish wakeups" in r.getMessage()]
        assert len(errors) == 1 and errors[0].levelno == logging.WARNING
        assert "database unreachable" in errors[0].getMessage() and not errors[0].exc_info
        assert worker.wait(run_id, timeout=20).state == "completed"
    finally:
        producer.shutdown()
        pool.close()


# --- caller-owned transactions ------------------------------------------------------------


def test_track_wakeups_publishes_after_the_callers_commit(
    make_client, listen, db, database_url, schema
) -> None:
    worker = make_client(workers=1, poll_interval=(30.0, 30.0))
    worker.start()
    assert worker.listener is not None and worker.runtime is not None
    wait_until(worker.listener.ready.is_set, 10, what="the listener")
    producer = make_client()
    with psycopg.connect(database_url) as conn:
        tracker = producer.track_wakeups(conn)
        run_id = producer.submit_tx(conn, _flow())
        assert tracker.wakeups.queues == {"default"}
        with pytest.raises(TransactionOpenError):
            producer.publish_wakeups(conn)  # not committed yet: refused, record kept
        conn.commit()
        # submit_tx sent nothing
        assert published_so_far(listen, database_url, schema, "cyclone_available") == []
        producer.publish_wakeups(conn)
        assert not tracker.wakeups  # published and no longer tracked
    delay = wait_until(lambda: _claim_delay(db, run_id), 10, what="the claim")
    assert delay < 10.0  # the poll interval is 30 s: the published wakeup woke the worker
    assert published_so_far(listen, database_url, schema)[0] == (
        "cyclone_available",
        {"schema": schema, "queues": ["default"]},
    )


def test_track_wakeups_context_manager_publishes_on_exit_and_discards_on_error(
    make_client, listen, database_url, schema
) -> None:
    producer = make_client()
    with psycopg.connect(database_url, autocommit=True) as conn:
        # exits in reverse order: the transaction commits, then the tracker publishes
        with producer.track_wakeups(conn), conn.transaction():
            producer.submit_tx(conn, _flow("alpha"))
        assert published_so_far(listen, database_url, schema) == [
            ("cyclone_available", {"schema": schema, "queues": ["alpha"]})
        ]
        with (
            pytest.raises(RuntimeError),
            producer.track_wakeups(conn) as tracker,
            conn.transaction(),
        ):
            producer.submit_tx(conn, _flow("beta"))
            raise RuntimeError("rolled back")
        assert not tracker.wakeups
        producer.publish_wakeups(conn)  # untracked: a no-op
        producer.submit_tx(conn, _flow("gamma"))  # untracked: nothing recorded or sent
        producer.publish_wakeups(conn)
    assert published_so_far(listen, database_url, schema) == []


# --- wait ---------------------------------------------------------------------------------


def test_wait_returns_promptly_on_completion_via_run_done(make_client, db, schema) -> None:
    create_ledger(db)
    key = uuid.uuid4().hex
    worker = make_client(workers=1)
    worker.start()
    waiter = make_client(poll_interval=(5.0, 5.0))  # polling alone would take 5 s
    run_id = waiter.submit(
        _flow(call="cyclone_test_handlers.engine:gate"), {"key": key, "schema": schema}
    )
    assert engine.event(key, "entered").wait(10)
    result: dict[str, Any] = {}

    def wait_for_it() -> None:
        result["status"] = waiter.wait(run_id, timeout=20)
        result["done"] = time.monotonic()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    wait_until(
        lambda: (
            run_id in waiter._hub._waiters
            and waiter.listener is not None
            and waiter.listener.ready.is_set()
        ),
        10,
        what="the waiter to listen",
    )
    released = time.monotonic()
    engine.event(key, "release").set()
    thread.join(20)
    assert result["status"].state == "completed"
    assert result["done"] - released < 2.0, "wait() was not woken by cyclone_run_done"


def test_wait_times_out_with_a_typed_error(make_client) -> None:
    client = make_client()
    run_id = client.submit(_flow("nobody-serves-this"))
    started = time.monotonic()
    with pytest.raises(WaitTimeoutError) as info:
        client.wait(run_id, timeout=0.3)
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 3.0
    assert (info.value.run_id, info.value.state, info.value.timeout) == (run_id, "running", 0.3)
    assert isinstance(info.value, TimeoutError)
    with pytest.raises(WaitTimeoutError):
        client.wait(run_id, timeout=0)


def test_wait_unknown_run_and_bad_timeout(make_client) -> None:
    client = make_client()
    with pytest.raises(RunNotFoundError):
        client.wait(str(uuid.uuid4()), timeout=1)
    with pytest.raises(RunNotFoundError):
        client.wait("not-a-run-id", timeout=1)
    with pytest.raises(ValueError, match="timeout"):
        client.wait(str(uuid.uuid4()), timeout=-1)


def test_wait_polls_when_notify_is_disabled(make_client) -> None:
    worker = make_client(workers=1)
    worker.start()
    waiter = make_client(notify=False, poll_interval=(0.02, 0.1))
    run_id = waiter.submit(_flow(), {"x": 3})
    assert waiter.wait(run_id, timeout=20).state == "completed"
    assert waiter.listener is None
    assert waiter.wait(run_id, timeout=0).state == "completed"  # terminal: no timeout

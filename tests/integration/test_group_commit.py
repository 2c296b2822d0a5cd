"""The group-commit completer under faults (``BatchSink`` in
cyclone_flow/worker/completion.py): handlers that do not open ``ctx.completion_tx()`` hand
their completion to the client's completer thread, which commits a batch in one
transaction.

Faults are injected in our own code (a wrapped ``BatchSink.complete_steps`` that raises a
``DeadlockDetected`` or holds the completer until the test's condition holds in the
database); Postgres is always the real one. Each handler call is recorded in ``gc_calls``
and each transition of a step to ``completed`` in ``gc_completions`` (a trigger), see
:mod:`cyclone_test_handlers.group_commit`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from cyclone_test_handlers import group_commit as gc
from helpers.engine import worker_parts
from helpers.procs import wait_until

from cyclone_flow import Client
from cyclone_flow.db.conn import CONFLICT_RETRIES
from cyclone_flow.events import StepEvent
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.worker.completion import BatchSink

ONE = load_flow_text(
    'name: gc_one\nnodes:\n  s: {call: "cyclone_test_handlers.group_commit:gated", '
    'input: "${{ run.input }}"}\n'
)
TIMED = load_flow_text(
    "name: gc_timed\nnodes:\n  s:\n"
    '    call: "cyclone_test_handlers.group_commit:gated"\n'
    '    input: "${{ run.input }}"\n'
    "    timeout: 1s\n"
    "    retry: {max_attempts: 2, backoff: {initial: 0s, max: 0s}}\n"
)


@pytest.fixture(autouse=True)
def _calls(database_url: str, schema: str, db: psycopg.Connection[Any]) -> Iterator[None]:
    db.execute(gc.CALLS_DDL)
    gc.configure(database_url, schema)
    gc.GATE.clear()
    yield
    gc.GATE.set()  # let any handler still waiting go
    gc.close_connections()


def _completer(client: Client) -> BatchSink:
    worker = client.runtime
    assert worker is not None and worker.executor.batch is not None
    return worker.executor.batch


def _wrap_complete_steps(client: Client, before: Callable[[list[Any]], None]) -> list[list[str]]:
    """Fault injection: ``before(batch)`` runs first in every group commit of ``client``'s
    completer (``BatchSink.complete_steps``); returns the node lists of the calls so far."""
    completer = worker_parts(client).completer  # the one its worker uses once started
    original = completer.complete_steps
    calls: list[list[str]] = []

    def complete_steps(tx: Any, batch: Any) -> Any:
        calls.append([f"{s.run_id}/{s.node}" for s, _ in batch])
        before(list(batch))
        return original(tx, batch)

    completer.complete_steps = complete_steps  # type: ignore[method-assign]
    return calls


def _calls_per_step(db: psycopg.Connection[Any]) -> Counter[str]:
    rows = db.execute("SELECT run_id::text, count(*) FROM gc_calls GROUP BY run_id").fetchall()
    return Counter({r[0]: r[1] for r in rows})


def _completions(db: psycopg.Connection[Any]) -> Counter[int]:
    rows = db.execute("SELECT step_id, count(*) FROM gc_completions GROUP BY step_id").fetchall()
    return Counter({r[0]: r[1] for r in rows})


def _done(db: psycopg.Connection[Any], run_ids: set[str]) -> bool:
    row = db.execute(
        "SELECT count(*) FROM cyclone_runs WHERE id = ANY(%s::uuid[]) AND state = 'completed'",
        (list(run_ids),),
    ).fetchone()
    assert row is not None
    return int(row[0]) == len(run_ids)


def test_a_completion_waiting_in_the_completer_keeps_its_lease(
    make_client: Callable[..., Client], db: psycopg.Connection[Any], database_url: str
) -> None:
    """While its completion waits in the completer for more than twice the lease TTL, a
    step's lease is renewed by the heartbeat: the sweep never reclaims it and its handler
    runs once (Engine Design: Leases and Heartbeats)."""
    client = make_client(workers=4, lease_ttl=1.0, sweep_interval=0.2)
    slow = load_flow_text(
        'name: gc_slow\nnodes:\n  s: {call: "cyclone_test_handlers.group_commit:gated", '
        'input: "${{ run.input }}"}\n'
    )
    run_ids = {client.submit(slow, {"n": i}) for i in range(4)}
    held = threading.Event()

    def hold(batch: list[Any]) -> None:
        if not held.is_set():  # the first batch waits until the leases would have lapsed
            held.set()
            with psycopg.connect(database_url) as conn:
                start = conn.execute("SELECT clock_timestamp()").fetchone()
                assert start is not None
                wait_until(
                    lambda: conn.execute(
                        "SELECT clock_timestamp() > %s + interval '2.5 seconds'", start
                    ).fetchone()[0],  # type: ignore[index]
                    timeout=10,
                    what="2.5 s of database time",
                )

    _wrap_complete_steps(client, hold)
    client.start()
    wait_until(lambda: _done(db, run_ids), timeout=20, what="every run completed")
    rows = db.execute("SELECT node, attempt, reclaims FROM cyclone_steps").fetchall()
    assert rows == [("s", 1, 0)] * 4
    assert sorted(_calls_per_step(db).values()) == [1, 1, 1, 1]
    assert held.is_set()
    assert _completer(client).steps == 4


def test_a_failed_batch_commits_each_step_alone_and_fires_each_event_once(
    make_client: Callable[..., Client],
    db: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A batch whose transaction fails (an injected ``DeadlockDetected``, every time it is
    tried again) commits nothing; the completer then commits each of its steps alone:
    every run completes, each step goes to ``completed`` once and fires one ``completed``
    event, each run's completion is
    logged once, ``BatchSink.alone`` counts the steps committed alone, and a ``wait()``
    on another client (polling only every 30 s) is woken by the run-done wakeup of the
    completer's commit."""
    events: list[StepEvent] = []
    events_lock = threading.Lock()

    def on_event(event: StepEvent) -> None:
        with events_lock:
            events.append(event)

    client = make_client(workers=6, on_step_event=on_event)
    waiter = make_client(poll_interval=(30.0, 30.0))
    run_ids = [client.submit(ONE, {"n": i}) for i in range(12)]
    states: dict[str, str] = {}
    woken: dict[str, float] = {}

    def wait(rid: str) -> None:
        status = waiter.wait(rid, timeout=15)
        states[rid] = str(status.state)
        woken[rid] = time.monotonic()

    looks: list[str] = []
    get_run = waiter.get_run

    def counted_get_run(rid: str) -> Any:
        looks.append(rid)
        return get_run(rid)

    waiter.get_run = counted_get_run  # type: ignore[method-assign]
    waits = [threading.Thread(target=wait, args=(rid,)) for rid in run_ids]
    for thread in waits:
        thread.start()
    failed: list[int] = []

    held = threading.Event()

    def fail_batches(batch: list[Any]) -> None:
        completer = _completer(client)
        if not held.is_set():
            # the first batch waits until every other completion queued behind it
            held.set()
            wait_until(
                lambda: completer.pending() + len(batch) == 12, timeout=10, what="all queued"
            )
            # and until each wait() had its first look at its (running) run
            wait_until(lambda: len(set(looks)) == 12, timeout=10, what="every wait() looked")
        if len(batch) > 1:
            failed.append(len(batch))
            raise psycopg.errors.DeadlockDetected("injected: deadlock detected")

    calls = _wrap_complete_steps(client, fail_batches)
    with caplog.at_level(logging.INFO, logger="cyclone_flow"):
        client.start()
        wait_until(lambda: _done(db, set(run_ids)), timeout=20, what="every run completed")
        done_at = time.monotonic()
        for thread in waits:
            thread.join(20)
        completer = _completer(client)
        wait_until(lambda: completer.steps == 12, timeout=5, what="12 settled")

    assert states == dict.fromkeys(run_ids, "completed")
    # woken by the commit's wakeup, not by its 30 s polling nor its 15 s timeout
    assert max(woken.values()) - done_at < 5.0, sorted(woken.values())
    assert sum(failed) >= 11, calls  # at least the 11 queued behind the first failed
    # a deadlock is tried again at once (CONFLICT_RETRIES runs of the same batch) before
    # the steps are committed alone
    assert completer.alone * CONFLICT_RETRIES == sum(failed)
    assert completer.batches == len(calls) - len(failed) - completer.alone
    step_ids = {r[0] for r in db.execute("SELECT id FROM cyclone_steps").fetchall()}
    assert set(_completions(db)) == step_ids and set(_completions(db).values()) == {1}
    with events_lock:
        completed = Counter(e.step_id for e in events if e.kind == "completed")
        kinds = Counter(e.kind for e in events)
    assert completed == Counter(dict.fromkeys(step_ids, 1))
    assert kinds == {"claimed": 12, "completed": 12}
    logged = Counter(r.getMessage() for r in caplog.records if r.getMessage().startswith("run "))
    assert logged == Counter({f"run {rid} completed": 1 for rid in run_ids})
    assert sorted(_calls_per_step(db).values()) == [1] * 12
    assert "committing each alone" in caplog.text


def test_a_stale_step_in_a_batch_is_settled_stale_and_the_others_complete(
    make_client: Callable[..., Client], db: psycopg.Connection[Any], database_url: str
) -> None:
    """A step whose ``timeout`` passed while its completion waited in the completer is
    stale inside its batch: the batch's other steps complete, and the late completion
    records a failed attempt of kind ``timeout`` (as the per-step path does), which is
    retried and then completes (Engine Design: Leases and Heartbeats, CAS State
    Transitions)."""
    events: list[StepEvent] = []
    client = make_client(workers=4, sweep_interval=60.0, on_step_event=events.append)
    first = client.submit(ONE, {"n": 1})
    timed = client.submit(TIMED, {"n": 0, "gate": True})
    others = [client.submit(ONE, {"n": n, "gate": True}) for n in (2, 3)]
    held = threading.Event()

    def hold(batch: list[Any]) -> None:
        if held.is_set():
            return
        held.set()  # the first batch: the ungated step's completion
        gc.GATE.set()
        wait_until(lambda: _completer(client).pending() == 3, timeout=10, what="3 queued")
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{client.config.schema}"')
            wait_until(
                lambda: conn.execute(
                    "SELECT started_at + timeout < now() FROM cyclone_steps WHERE run_id = %s",
                    (timed,),
                ).fetchone()[0],  # type: ignore[index]
                timeout=10,
                what="the timed step's deadline to pass",
            )

    calls = _wrap_complete_steps(client, hold)
    client.start()
    run_ids = {first, timed, *others}
    wait_until(lambda: _done(db, run_ids), timeout=20, what="every run completed")
    assert calls[0] == [f"{first}/s"]
    assert sorted(calls[1]) == sorted(f"{rid}/s" for rid in (timed, *others)), calls
    rows = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT run_id::text, state, attempt, errors->0->>'error_kind',"
            " jsonb_array_length(errors) FROM cyclone_steps"
        ).fetchall()
    }
    assert rows[timed] == ("completed", 2, "timeout", 1)
    assert all(rows[rid] == ("completed", 1, None, 0) for rid in (first, *others)), rows
    assert _calls_per_step(db) == Counter({first: 1, timed: 2, others[0]: 1, others[1]: 1})
    assert set(_completions(db).values()) == {1}
    wait_until(lambda: _completer(client).steps == 4, timeout=5, what="4 settled")
    ended = Counter((e.run_id, e.kind, e.error_kind) for e in events if e.kind != "claimed")
    assert ended == Counter(
        {(timed, "retry_scheduled", "timeout"): 1}
        | {(rid, "completed", None): 1 for rid in run_ids}
    )


def test_shutdown_commits_the_completions_still_queued(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """``Client.shutdown()`` while completions wait in the completer (the first batch is
    held until the shutdown stopped the completer): when it returns every one of them
    committed under its own claim (none released, none lost, no lease left) and the
    client holds no lease."""
    client = make_client(workers=4)
    run_ids = {client.submit(ONE, {"n": i}) for i in range(8)}
    stopping = threading.Event()
    held = threading.Event()

    def hold(batch: list[Any]) -> None:
        if held.is_set():
            return
        held.set()
        completer = _completer(client)
        wait_until(lambda: completer.pending() + len(batch) == 8, timeout=10, what="8 queued")
        wait_until(stopping.is_set, timeout=10, what="the shutdown to stop the completer")

    _wrap_complete_steps(client, hold)
    client.start()
    completer = _completer(client)
    stop = completer.stop

    def stop_seen(timeout: float = 10.0) -> None:
        stopping.set()
        stop(timeout)

    completer.stop = stop_seen  # type: ignore[method-assign]
    wait_until(held.is_set, timeout=10, what="the first batch")
    worker = client.runtime
    assert worker is not None
    wait_until(lambda: worker.in_flight() == 8, timeout=10, what="8 leases held")
    client.shutdown(timeout=5.0)
    # a post-condition of shutdown(): nothing to wait for
    assert _done(db, run_ids)
    rows = db.execute("SELECT state, attempt, reclaims, lease_expiry FROM cyclone_steps").fetchall()
    assert rows == [("completed", 1, 0, None)] * 8
    assert completer.steps == 8 and worker.in_flight() == 0
    assert sorted(_calls_per_step(db).values()) == [1] * 8
    assert set(_completions(db).values()) == {1}


def test_a_handler_running_past_the_shutdown_timeout_commits_alone(
    make_client: Callable[..., Client],
    db: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler still running when the shutdown timeout passed: shutdown releases its
    lease and tells it to stop; its late completion does not go to the (stopped)
    completer but is committed alone, and finds itself stale; another client runs the
    step again, which completes once (Engine Design: Graceful Shutdown)."""
    client = make_client(workers=1)
    run_id = client.submit(ONE, {"n": 7, "gate": True})
    client.start()
    wait_until(lambda: _calls_per_step(db)[run_id] == 1, timeout=10, what="the handler call")
    with caplog.at_level(logging.INFO, logger="cyclone_flow"):
        client.shutdown(timeout=0.3)
        wait_until(
            lambda: "stale completion not written" in caplog.text,
            timeout=10,
            what="the late completion, committed alone and found stale",
        )
    assert _completer(client).steps == 0
    row = db.execute("SELECT state, attempt, lease_owner FROM cyclone_steps").fetchone()
    assert row == ("available", 1, None)  # released, no attempt charged
    gc.GATE.set()
    other = make_client(workers=1)
    other.start()
    wait_until(lambda: _done(db, {run_id}), timeout=10, what="the run completed by another")
    assert _calls_per_step(db) == Counter({run_id: 2})
    assert set(_completions(db).values()) == {1}
    assert other.get_run(run_id).output == {"s": {"n": 7}}


def test_a_step_reclaimed_while_queued_is_stale_in_its_batch_next_to_its_new_claim(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """The heartbeat of one step stops while its completion waits in the completer (as
    when the lease was lost), the sweep reclaims it, and this same client runs it again:
    its old completion and its new one then sit in ONE batch. The old one is stale
    (guarded by its lease_generation), the new one and the batch's other steps complete,
    each step goes to ``completed`` once and fires one ``completed`` event (Engine
    Design: Leases and Heartbeats, CAS State Transitions)."""
    events: list[StepEvent] = []
    client = make_client(workers=4, lease_ttl=1.0, sweep_interval=0.2, on_step_event=events.append)
    first = client.submit(ONE, {"n": 1})
    lost, *others = [client.submit(ONE, {"n": n, "gate": True}) for n in (2, 3, 4)]
    held = threading.Event()

    def hold(batch: list[Any]) -> None:
        if held.is_set():
            return
        held.set()  # the first batch: the ungated step's completion
        completer = _completer(client)
        worker = client.runtime
        assert worker is not None
        gc.GATE.set()
        wait_until(lambda: completer.pending() == 3, timeout=10, what="3 queued")
        step_id = db.execute("SELECT id FROM cyclone_steps WHERE run_id = %s", (lost,)).fetchone()
        assert step_id is not None
        with worker._lock:  # stop renewing its lease, as after a lost lease
            [told] = [t for (sid, _), t in worker._leases.items() if sid == step_id[0]]
            told.set()
        wait_until(lambda: completer.pending() == 4, timeout=10, what="its new completion")

    calls = _wrap_complete_steps(client, hold)
    client.start()
    run_ids = {first, lost, *others}
    wait_until(lambda: _done(db, run_ids), timeout=20, what="every run completed")
    assert sorted(calls[1]) == sorted(f"{rid}/s" for rid in (lost, lost, *others)), calls
    rows = dict(
        db.execute("SELECT run_id::text, (state, attempt, reclaims) FROM cyclone_steps").fetchall()
    )
    assert rows[lost] == ("completed", "1", "1")
    assert _calls_per_step(db) == Counter({first: 1, lost: 2, others[0]: 1, others[1]: 1})
    assert set(_completions(db).values()) == {1}
    completer = _completer(client)
    wait_until(lambda: completer.steps >= 4, timeout=5, what="4 settled")
    wait_until(lambda: client.runtime is None or client.in_flight() == 0, timeout=5)
    assert completer.steps == 4  # the stale old completion is not counted
    assert Counter(e.run_id for e in events if e.kind == "completed") == Counter(
        dict.fromkeys(run_ids, 1)
    )
    assert [e.run_id for e in events if e.kind not in ("claimed", "completed")] == [lost]


def test_a_completion_settled_before_its_worker_thread_returns_leaves_no_lease_behind(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """The completer may commit and settle a handed-over step before the worker thread
    that handed it over has finished its own bookkeeping (here forced: that thread waits
    after the hand-over). Nothing of the step may stay tracked: no lease in the heartbeat's
    set, none among the handed-over ones (a leak of one entry per such step)."""
    client = make_client(workers=2)
    run_ids = [client.submit(ONE, {"n": n}) for n in range(6)]
    client.start()
    worker = client.runtime
    assert worker is not None
    execute = worker.executor.execute

    def slow_after_hand_over(*args: Any, **kwargs: Any) -> bool:
        handed_over = execute(*args, **kwargs)
        if handed_over:  # the completer settles the step meanwhile
            wait_until(lambda: _completer(client).pending() == 0, timeout=10, what="commit")
            time.sleep(0.05)
        return handed_over

    worker.executor.execute = slow_after_hand_over  # type: ignore[method-assign]
    for run_id in run_ids:
        assert client.wait(run_id, timeout=20).state == "completed"
    wait_until(lambda: worker.in_flight() == 0, timeout=10, what="every lease dropped")
    assert worker._handed == set()
    assert _completer(client).steps >= 1

"""Unique runs (seeds: Unique Jobs) and sequences (seeds: Sequences): enforced by the
database (a partial unique index; the sequence's row lock and held root steps), checked
from the database's rows and timestamps."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from cyclone_test_handlers.engine import event
from helpers.engine import release_stalled_sequences
from helpers.procs import wait_until

from cyclone_flow import Client, RunStateError
from cyclone_flow.flowfile import load_flow_text

NOOP = "cyclone_test_handlers.queueing:noop"
FLOW = load_flow_text(
    """
name: uniq
nodes:
  a: {call: "cyclone_test_handlers.queueing:noop"}
  b: {call: "cyclone_test_handlers.queueing:noop", needs: [a]}
"""
)


def _count(db: Any, table: str) -> int:
    return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


@pytest.mark.parametrize("how", ["submit", "enqueue"])
def test_twenty_concurrent_producers_create_one_run(
    make_client: Callable[..., Client], db: Any, how: str
) -> None:
    client = make_client(tx_slots=20)  # a pool of 26: every producer its own connection
    barrier = threading.Barrier(20)
    results: list[Any] = []
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            barrier.wait(10)
            if how == "submit":
                results.append(client.submit(FLOW, {"n": 1}, unique_key="order-42"))
            else:
                results.append(client.enqueue(NOOP, {"n": 1}, unique_key="order-42"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len(results) == 20 and len(set(results)) == 1
    assert sorted(r.duplicate for r in results) == [False] + [True] * 19
    assert _count(db, "cyclone_runs") == 1
    assert _count(db, "cyclone_steps") == (2 if how == "submit" else 1)


def test_the_key_is_freed_when_the_run_leaves_its_covered_states(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    first = client.enqueue(NOOP, {}, unique_key="k")
    assert client.enqueue(NOOP, {}, unique_key="k") == first
    sticky = client.enqueue(NOOP, {}, unique_key="s", unique_states=["running", "completed"])
    windowed = client.enqueue(NOOP, {}, unique_key="w", unique_window=3600)
    assert client.enqueue(NOOP, {}, unique_key="w", unique_window=3600) == windowed
    client.start()
    for run in (first, sticky, windowed):
        assert client.wait(run, timeout=10).state == "completed"
    # default: only running runs hold the key, so a new run is created
    second = client.enqueue(NOOP, {}, unique_key="k")
    assert second != first and not second.duplicate
    # a key that also covers completed runs keeps returning the completed run
    again = client.enqueue(NOOP, {}, unique_key="s", unique_states=["running", "completed"])
    assert again == sticky and again.duplicate
    slots = dict(db.execute("SELECT id::text, unique_slot FROM cyclone_runs").fetchall())
    assert slots[first] is None and slots[sticky] == "s"
    assert slots[windowed] is None  # completed: freed, whatever the window


def test_a_cancelled_run_frees_its_key(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run = client.submit(FLOW, unique_key="c")
    assert client.cancel(run)
    assert client.submit(FLOW, unique_key="c") != run


def _timeline(db: Any, runs: list[str]) -> list[tuple[Any, Any]]:
    rows = dict(
        (str(r[0]), (r[1], r[2]))
        for r in db.execute(
            "SELECT run_id, min(started_at), max(finished_at) FROM cyclone_steps GROUP BY run_id"
        ).fetchall()
    )
    return [rows[r] for r in runs]


def test_a_sequence_of_five_runs_executes_strictly_in_order(
    make_client: Callable[..., Client], db: Any
) -> None:
    producer = make_client()
    runs = [producer.submit(FLOW, {"i": i}, sequence="acct-1") for i in range(5)]
    other = producer.submit(FLOW, {"i": 99}, sequence="acct-2")
    held = db.execute(
        "SELECT id::text, sequence_pos, sequence_held FROM cyclone_runs ORDER BY sequence_pos"
    ).fetchall()
    assert [(h[1], h[2]) for h in held if h[0] in runs] == [(1, False)] + [
        (p, True) for p in range(2, 6)
    ]
    workers = [make_client(workers=4), make_client(workers=4)]
    for w in workers:
        w.start()
    for run in [*runs, other]:
        assert workers[0].wait(run, timeout=20).state == "completed"
    timeline = _timeline(db, runs)
    for (_, finished), (started, _) in itertools.pairwise(timeline):
        assert finished <= started  # each run starts after the previous one finished


@pytest.mark.parametrize("resolve", ["retry", "cancel"])
def test_a_failed_run_holds_the_sequence_until_retried_or_cancelled(
    make_client: Callable[..., Client], db: Any, resolve: str
) -> None:
    key = uuid.uuid4().hex
    client = make_client(sweep_interval=0.05)
    first = client.enqueue(
        "cyclone_test_handlers.queueing:fail_until_ok", {"key": key}, sequence="q"
    )
    second = client.enqueue(NOOP, {"after": first}, sequence="q")
    client.start()
    assert client.wait(first, timeout=10).state == "failed"
    # a failed run is not finished for its sequence: even the safety net holds the next
    assert release_stalled_sequences(client)[0] == 0
    steps = client.list_steps(second)
    assert [s.state for s in steps] == ["pending"]
    assert client.get_run(second).state == "running"
    if resolve == "retry":
        event(key, "ok").set()
        client.retry(first)
        assert client.wait(first, timeout=10).state == "completed"
    else:
        assert client.cancel(first)
        assert client.get_run(first).state == "cancelled"
    assert client.wait(second, timeout=10).state == "completed"
    (started,) = [s.started_at for s in client.list_steps(second)]
    finished = client.get_run(first).finished_at
    assert finished is not None and started >= finished


def test_cancelling_a_held_run_keeps_the_order(make_client: Callable[..., Client]) -> None:
    key = uuid.uuid4().hex
    client = make_client()
    first = client.enqueue("cyclone_test_handlers.queueing:block", {"key": key}, sequence="z")
    second = client.enqueue(NOOP, {}, sequence="z")
    third = client.enqueue(NOOP, {}, sequence="z")
    client.start()
    wait_until(lambda: client.list_steps(first)[0].state == "running", what="first running")
    assert client.cancel(second)
    assert [s.state for s in client.list_steps(third)] == ["pending"]
    event(key, "go").set()
    assert client.wait(third, timeout=10).state == "completed"


def test_a_finished_run_of_a_sequence_cannot_be_retried(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    run = client.enqueue(NOOP, {}, sequence="r")
    assert client.cancel(run)
    with pytest.raises(RunStateError, match="in a sequence"):
        client.retry(run)


def test_the_safety_net_releases_a_stalled_sequence(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    first = client.enqueue(NOOP, {}, sequence="n")
    second = client.enqueue(NOOP, {}, sequence="n")
    # simulate a release that never happened: finish the first run behind the engine's back
    db.execute(
        "UPDATE cyclone_steps SET state = 'cancelled', finished_at = now() WHERE run_id = %s",
        (first,),
    )
    db.execute(
        "UPDATE cyclone_runs SET state = 'cancelled', finished_at = now() WHERE id = %s",
        (first,),
    )
    assert [s.state for s in client.list_steps(second)] == ["pending"]
    released, wakeups = release_stalled_sequences(client)
    assert released == 1 and wakeups.queues == {"default"}
    assert [s.state for s in client.list_steps(second)] == ["available"]
    assert release_stalled_sequences(client)[0] == 0

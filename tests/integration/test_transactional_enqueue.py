"""Transactional enqueueing (Engine Design: Why Postgres, ctx.CompletionTx(); seeds:
Transactional Enqueueing): runs written in the caller's transaction or in a step's
completion transaction exist exactly when that transaction commits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from helpers.paths import FLOWS
from helpers.procs import wait_until

from cyclone_flow import Client, options
from cyclone_flow import inserter as inserter_module

NOOP = "cyclone_test_handlers.queueing:noop"
ENQUEUER = "cyclone_test_handlers.queueing:enqueue_job"


def _runs(db: Any, flow_name: str) -> list[tuple[str, str]]:
    return [
        (str(r[0]), r[1])
        for r in db.execute(
            "SELECT id, state FROM cyclone_runs WHERE flow_name = %s ORDER BY created_at",
            (flow_name,),
        ).fetchall()
    ]


def test_enqueue_tx_and_submit_tx_roll_back_with_the_caller(
    make_client: Callable[..., Client], database_url: str, db: Any
) -> None:
    client = make_client()
    flow = FLOWS / "hello.yaml"
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.tx_orders (id int)")
        conn.commit()
        conn.execute("INSERT INTO public.tx_orders VALUES (1)")
        client.enqueue_tx(conn, NOOP, {"order": 1}, queue="mail", delay=5, unique_key="o1")
        client.submit_tx(conn, flow, None, sequence="orders")
        conn.rollback()
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM cyclone_steps").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM cyclone_sequences").fetchone() == (0,)
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO public.tx_orders VALUES (2)")
        job = client.enqueue_tx(conn, NOOP, {"order": 2}, unique_key="o2")
        conn.commit()
    assert _runs(db, NOOP) == [(job, "running")]
    client.start()
    assert client.wait(job, timeout=10).state == "completed"  # found by polling
    db.execute("DROP TABLE public.tx_orders")


def test_enqueue_completion_commits_with_the_step_and_wakes_its_queue(
    make_client: Callable[..., Client], db: Any
) -> None:
    # The job's queue is served by a client that polls only every 5 s: it claims the job
    # at once only because the completion published the job's wakeup with its own.
    slow = make_client(worker_queues={"after": 1}, poll_interval=(5.0, 5.0))
    slow.start()
    wait_until(
        lambda: any(t.name == "cyclone-listener" and t.is_alive() for t in threading.enumerate()),
        what="the listener",
    )
    worker = make_client(worker_queues={"default": 1})
    parent = worker.enqueue(ENQUEUER, {"queue": "after"})
    worker.start()
    assert worker.wait(parent, timeout=10).state == "completed"
    job = worker.get_run(parent).output["job"]["job"]  # type: ignore[index]
    assert slow.wait(job, timeout=10).state == "completed"
    assert _runs(db, NOOP) == [(job, "completed")]
    assert worker.get_run(job).input == {"from": parent}
    (parent_step,) = worker.list_steps(parent)
    (job_step,) = worker.list_steps(job)
    assert job_step.queue == "after"
    assert parent_step.finished_at is not None and job_step.started_at is not None
    assert job_step.started_at - parent_step.finished_at < timedelta(seconds=2.5)


def test_enqueue_completion_of_a_failed_attempt_leaves_nothing(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    parent = client.enqueue(
        ENQUEUER,
        {"fail": True},
        retry={"max_attempts": 3, "backoff": {"initial": "10ms", "max": "10ms"}},
    )
    client.start()
    assert client.wait(parent, timeout=10).state == "failed"
    (step,) = client.list_steps(parent)
    assert step.attempt == 3 and "failing after enqueue_completion" in (step.error or "")
    # three attempts each enqueued a job in their completion transaction: none committed
    assert _runs(db, NOOP) == []


def test_submit_completion_in_the_completion_transaction(
    make_client: Callable[..., Client], db: Any
) -> None:
    hello = str(FLOWS / "hello.yaml")
    client = make_client()
    ok = client.enqueue("cyclone_test_handlers.queueing:submit_flow", {"flow": hello})
    bad = client.enqueue(
        "cyclone_test_handlers.queueing:submit_flow", {"flow": hello, "fail": True}
    )
    client.start()
    assert client.wait(ok, timeout=10).state == "completed"
    assert client.wait(bad, timeout=10).state == "failed"
    child = client.get_run(ok).output["job"]["child"]  # type: ignore[index]
    assert client.get_run(child).input == {"name": f"run {ok[:8]}"}
    children = db.execute("SELECT count(*) FROM cyclone_runs WHERE flow_name = 'hello'").fetchone()
    assert children == (1,)
    wait_until(lambda: client.get_run(child).state != "running", what="the child run")


def test_enqueue_completion_builds_its_job_flow_through_the_inserters_cache(
    make_client: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the completion path built the job flow itself (``options.job_flow``),
    skipping ``Inserter.job_flow``'s cache: two enqueues of one callable build it once."""
    built: list[str] = []

    def counting(call: str, **keys: Any) -> Any:
        built.append(call)
        return options.job_flow(call, **keys)

    monkeypatch.setattr(inserter_module, "job_flow", counting)
    worker = make_client(worker_queues={"default": 1})
    parents = [worker.enqueue(ENQUEUER, {"queue": "default"}) for _ in range(2)]
    worker.start()
    for parent in parents:
        assert worker.wait(parent, timeout=10).state == "completed"
    assert built.count(NOOP) == 1

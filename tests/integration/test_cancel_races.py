"""An operator cancel racing a step's completion or failed attempt (Engine Design: CAS
State Transitions, "a cancel races with a completion"): exactly one wins
and nothing is half-applied. The handler wrote a ledger row through
``ctx.completion_tx()``; either the run and step are cancelled and no ledger row exists,
or the step completed with its row, the run completed and ``cancel()`` did nothing.

The free races meet at a barrier and go; the ordered races queue both transactions behind
a test-held run row lock so each order is exercised for certain."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from cyclone_test_handlers import engine, failures
from helpers.procs import wait_until
from helpers.rows import create_ledger, ledger_rows, step_row

from cyclone_flow import Client, StepEvent
from cyclone_flow.flowfile import load_flow_text

FLOW = "name: race\nnodes:\n  s: {call: 'cyclone_test_handlers.failures:ledger_then_race'}\n"


class Recorder:
    """``on_step_event`` and ``error_handler`` hooks that record per run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[StepEvent] = []
        self.errors: list[tuple[StepEvent, BaseException]] = []

    def on_event(self, event: StepEvent) -> None:
        with self.lock:
            self.events.append(event)

    def on_error(self, event: StepEvent, error: BaseException) -> None:
        with self.lock:
            self.errors.append((event, error))

    def kinds(self, run_id: str) -> list[str]:
        with self.lock:
            return [e.kind for e in self.events if e.run_id == run_id]

    def error_count(self, run_id: str) -> int:
        with self.lock:
            return sum(1 for e, _ in self.errors if e.run_id == run_id)


def _client(make_client: Callable[..., Client], rec: Recorder) -> Client:
    client = make_client(workers=1, on_step_event=rec.on_event, error_handler=rec.on_error)
    client.start()
    return client


def _start(client: Client, schema: str, *, fail: bool) -> tuple[str, str]:
    key = uuid.uuid4().hex
    run_id = client.submit(load_flow_text(FLOW), {"schema": schema, "key": key, "fail": fail})
    assert engine.event(key, "written").wait(10), "the handler never wrote its row"
    return run_id, key


def _settle(client: Client, run_id: str) -> None:
    """Wait until the handler's completion (or failure) was tried and the run is over."""
    assert client.runtime is not None
    wait_until(lambda: client.in_flight() == 0, what="the handler's result")
    wait_until(lambda: client.get_run(run_id).state.terminal, what="a terminal run")


def _check_one_winner(
    client: Client, db: Any, rec: Recorder, run_id: str, cancelled: bool, *, fail: bool
) -> str:
    """Assert the all-or-nothing outcome; return which side won."""
    run = client.get_run(run_id)
    step = step_row(db, run_id)
    rows = ledger_rows(db, run_id)
    kinds = rec.kinds(run_id)
    if cancelled:
        assert (run.state, run.error_kind) == ("cancelled", "cancelled")
        assert (step["state"], step["output"], step["errors"]) == ("cancelled", None, [])
        assert rows == []
        assert "completed" not in kinds and "discarded" not in kinds
        assert rec.error_count(run_id) == 0  # the failed attempt never committed
        return "cancel"
    if fail:
        assert (run.state, run.error_kind) == ("failed", "step_discarded")
        assert (step["state"], step["error_kind"]) == ("discarded", "handler_error")
        assert rows == []  # a failed attempt rolls back its business writes
        wait_until(lambda: rec.error_count(run_id) == 1, what="the error handler call")
        assert "discarded" in rec.kinds(run_id)
        return "failure"
    assert run.state == "completed" and run.output == {"s": {"ok": True}}
    assert step["state"] == "completed"
    assert [r[1:3] for r in rows] == [("s", "race")]
    wait_until(lambda: "completed" in rec.kinds(run_id), what="the completed event")
    assert "cancelled" not in rec.kinds(run_id)
    return "completion"


@pytest.mark.parametrize("fail", [False, True], ids=["completion", "failure"])
def test_cancel_racing_a_result_exactly_one_wins_every_time(
    make_client: Callable[..., Client], db: Any, schema: str, fail: bool
) -> None:
    create_ledger(db)
    rec = Recorder()
    client = _client(make_client, rec)
    rng = random.Random()
    wins: dict[str, int] = {}
    for _ in range(30 if not fail else 15):
        run_id, key = _start(client, schema, fail=fail)
        failures.barrier(key).wait(timeout=10)  # both sides go now
        if rng.random() < 0.5:  # vary who is a hair ahead; the barrier is the sync
            for _ in range(rng.randrange(2000)):
                pass
        cancelled = client.cancel(run_id)
        _settle(client, run_id)
        winner = _check_one_winner(client, db, rec, run_id, cancelled, fail=fail)
        wins[winner] = wins.get(winner, 0) + 1
    print(f"cancel vs {'failure' if fail else 'completion'}: {wins}")
    assert sum(wins.values()) == (15 if fail else 30)


def _run_lock_waiters(db: Any, schema: str) -> int:
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query LIKE %s AND query LIKE %s",
        (f"%{schema}%cyclone_runs%", "%FOR NO KEY UPDATE%"),
    ).fetchone()
    return int(row[0])


@pytest.mark.parametrize("fail", [False, True], ids=["completion", "failure"])
@pytest.mark.parametrize("first", ["result", "cancel"])
def test_cancel_and_result_queued_on_the_run_lock_in_either_order(
    make_client: Callable[..., Client],
    db: Any,
    schema: str,
    database_url: str,
    fail: bool,
    first: str,
) -> None:
    create_ledger(db)
    rec = Recorder()
    client = _client(make_client, rec)
    run_id, key = _start(client, schema, fail=fail)
    outcome: dict[str, bool] = {}
    canceller = threading.Thread(target=lambda: outcome.update(done=client.cancel(run_id)))
    with psycopg.connect(database_url) as holder:
        holder.execute(f'SELECT 1 FROM "{schema}".cyclone_runs WHERE id = %s FOR UPDATE', (run_id,))
        if first == "result":
            failures.barrier(key).wait(timeout=10)
            wait_until(lambda: _run_lock_waiters(db, schema) == 1, what="the result to queue")
            canceller.start()
        else:
            canceller.start()
            wait_until(lambda: _run_lock_waiters(db, schema) == 1, what="the cancel to queue")
            failures.barrier(key).wait(timeout=10)
        wait_until(lambda: _run_lock_waiters(db, schema) == 2, what="both to queue")
        holder.commit()  # the first in the queue takes the run lock first
    canceller.join(10)
    _settle(client, run_id)
    winner = _check_one_winner(client, db, rec, run_id, outcome["done"], fail=fail)
    assert winner == ("cancel" if first == "cancel" else "failure" if fail else "completion")

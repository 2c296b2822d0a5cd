"""Observability hooks (Client Options: Observability): ``on_step_event``
for every kind, each after its transition committed; ``error_handler`` once per failed
attempt after the failure committed, with the handler's own exception; an exception (even
``SystemExit``) inside either hook is logged and never stops the worker."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from helpers.engine import claim, sweep_once
from helpers.procs import wait_until

from cyclone_flow import Client, ClientStateError, StepEvent
from cyclone_flow.flowfile import load_flow_text

EVENTS = """
name: events
nodes:
  ok: {call: "cyclone_test_handlers.basic:echo"}
  flaky:
    call: cyclone_test_handlers.basic:boom
    retry: {max_attempts: 2, backoff: {initial: 0}}
  after: {call: "cyclone_test_handlers.basic:echo", needs: [flaky]}
"""
ONE = "name: one\nnodes:\n  s: {call: 'cyclone_test_handlers.basic:echo'}\n"

# What another connection must already see when the hook runs: the transition committed.
COMMITTED = {
    "claimed": "lease_generation >= 1 AND started_at IS NOT NULL",
    "completed": "state = 'completed'",
    "retry_scheduled": "jsonb_array_length(errors) >= %(attempt)s AND state <> 'discarded'",
    "discarded": "state = 'discarded'",
    "cancelled": "state = 'cancelled'",
    "reclaimed": "reclaims >= 1",
}


class CommitChecker:
    """A hook that records each event with whether its transition was visible, from an
    independent connection, at the moment the hook ran."""

    def __init__(self, database_url: str, schema: str) -> None:
        self.conn = psycopg.connect(database_url, autocommit=True)
        self.conn.execute(f'SET search_path TO "{schema}"')
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str, bool]] = []

    def __call__(self, event: StepEvent) -> None:
        where = COMMITTED[event.kind]
        with self.lock:
            row = self.conn.execute(
                f"SELECT ({where}) FROM cyclone_steps"
                " WHERE run_id = %(run_id)s AND node = %(node)s",
                {"run_id": event.run_id, "node": event.node, "attempt": event.attempt or 1},
            ).fetchone()
            self.seen.append((event.kind, event.node, bool(row and row[0])))

    def close(self) -> None:
        self.conn.close()


def test_every_step_event_kind_is_emitted_after_its_commit(
    make_client: Callable[..., Client], db: Any, database_url: str, schema: str
) -> None:
    checker = CommitChecker(database_url, schema)
    try:
        client = make_client(workers=2, on_step_event=checker, sweep_interval=3600)
        # reclaimed: a lease left by a crashed worker, found by the sweep
        crashed = client.submit(load_flow_text(ONE), {"v": 1})
        (ghost,) = claim(client, "ghost", 30.0, ["default"], 1)
        db.execute(
            "UPDATE cyclone_steps SET lease_expiry = now() - interval '1s' WHERE id = %s",
            (ghost.id,),
        )
        run_id = client.submit(load_flow_text(EVENTS), {"v": 2})
        client.start()
        assert client.runtime is not None
        assert sweep_once(client)["rescued"] == 1
        assert client.wait(crashed, timeout=10).state == "completed"
        assert client.wait(run_id, timeout=10).state == "failed"
        wait_until(lambda: client.in_flight() == 0, what="idle workers")
    finally:
        checker.close()
    kinds = [(kind, node) for kind, node, _ in checker.seen]
    for expected in [
        ("reclaimed", "s"),
        ("claimed", "s"),
        ("completed", "s"),
        ("claimed", "ok"),
        ("completed", "ok"),
        ("claimed", "flaky"),
        ("retry_scheduled", "flaky"),
        ("discarded", "flaky"),
        ("cancelled", "after"),
    ]:
        assert expected in kinds, (expected, checker.seen)
    assert kinds.count(("claimed", "flaky")) == 2
    assert kinds.count(("retry_scheduled", "flaky")) == 1
    assert kinds.count(("discarded", "flaky")) == 1
    not_committed = [seen for seen in checker.seen if not seen[2]]
    assert not_committed == [], "hooks ran before their transition was visible"


def test_error_handler_once_per_failed_attempt_after_commit_with_the_handlers_exception(
    make_client: Callable[..., Client], database_url: str, schema: str
) -> None:
    calls: list[tuple[StepEvent, BaseException, int]] = []
    check = psycopg.connect(database_url, autocommit=True)
    check.execute(f'SET search_path TO "{schema}"')

    def on_error(event: StepEvent, error: BaseException) -> None:
        row = check.execute(
            "SELECT jsonb_array_length(errors) FROM cyclone_steps WHERE run_id = %s AND node = %s",
            (event.run_id, event.node),
        ).fetchone()
        calls.append((event, error, row[0] if row else -1))

    try:
        client = make_client(workers=1, error_handler=on_error)
        flow = load_flow_text(
            "name: fails\nnodes:\n  f:\n    call: cyclone_test_handlers.basic:boom\n"
            "    retry: {max_attempts: 3, backoff: {initial: 0}}\n"
        )
        run_id = client.submit(flow, None)
        client.start()
        assert client.wait(run_id, timeout=15).state == "failed"
        wait_until(lambda: len(calls) == 3, what="three error_handler calls")
        ok = client.submit(load_flow_text(ONE), {"v": 1})
        assert client.wait(ok, timeout=10).state == "completed"
    finally:
        check.close()
    assert len(calls) == 3  # one per failed attempt, none for the completed run
    assert [c[0].kind for c in calls] == ["retry_scheduled", "retry_scheduled", "discarded"]
    assert [c[0].attempt for c in calls] == [1, 2, 3]
    assert [c[2] for c in calls] == [1, 2, 3]  # each failure had committed when called
    for _, error, _ in calls:
        assert type(error) is RuntimeError and str(error) == "boom"


@pytest.mark.parametrize("exc", [RuntimeError("hook bug"), SystemExit(2)], ids=["error", "exit"])
def test_hooks_that_raise_are_logged_and_the_worker_keeps_working(
    make_client: Callable[..., Client], caplog: pytest.LogCaptureFixture, exc: BaseException
) -> None:
    called: dict[str, int] = {"event": 0, "error": 0}

    def bad_event(event: StepEvent) -> None:
        called["event"] += 1
        raise exc

    def bad_error(event: StepEvent, error: BaseException) -> None:
        called["error"] += 1
        raise exc

    caplog.set_level(logging.ERROR, logger="cyclone_flow")
    client = make_client(workers=1, on_step_event=bad_event, error_handler=bad_error)
    client.start()
    flow = load_flow_text(ONE)
    failing = load_flow_text("name: f\nnodes:\n  f: {call: 'cyclone_test_handlers.basic:boom'}\n")
    for i in range(3):  # the claim loop and the single worker thread survive every raise
        assert client.wait(client.submit(failing, None), timeout=10).state == "failed"
        assert client.wait(client.submit(flow, {"i": i}), timeout=10).state == "completed"
    wait_until(lambda: called["error"] == 3, what="the error handler of the third failure")
    # claimed + completed/discarded per run (the last one may come just after wait())
    wait_until(lambda: called["event"] >= 12, what="every event hook call")
    client.shutdown()
    ignored = [r for r in caplog.records if "raised; ignored" in r.getMessage()]
    assert len(ignored) == called["event"] + called["error"]  # every raise was logged


def test_observe_steps_after_start_is_a_typed_usage_error(make_client) -> None:
    client = make_client(workers=1)
    client.observe_steps(lambda event: None)  # before start(): accepted
    client.start()
    with pytest.raises(ClientStateError, match=r"observe_steps\(\): must be called before") as info:
        client.observe_steps(lambda event: None)
    assert (info.value.method, info.value.exit_code) == ("observe_steps()", 2)

"""wait_signal nodes and signals, the wait scanner on signal waits, and the deadline
scanner (Client Options: WithMaxSignalWait, WithPayloadLimits; Engine Design: Pool Budget
lists the wait and deadline scanners)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest
from cyclone_test_handlers import engine
from helpers.engine import deadline_scanner, wait_scanner
from helpers.procs import wait_until

from cyclone_flow import (
    ConfigError,
    InputValidationError,
    PayloadLimits,
    PayloadTooLargeError,
    RunNotFoundError,
    RunStateError,
    SignalRejectedError,
)
from cyclone_flow.flowfile import load_flow_text

APPROVAL = load_flow_text(
    """
name: approval
nodes:
  draft:
    call: cyclone_test_handlers.engine:gate
  approve:
    type: wait_signal
    signal: approved
    needs: [draft]
  publish:
    call: cyclone_test_handlers.basic:echo
    needs: [approve]
    input: {by: "${{ nodes.approve.output.by }}"}
"""
)

ROOT_WAIT = """
name: root-wait
nodes:
  approve:
    type: wait_signal
    signal: go
    MAX_WAIT
  after:
    call: cyclone_test_handlers.basic:echo
    needs: [approve]
    input: "${{ nodes.approve.output }}"
"""


def _flow(max_wait: str = "") -> Any:
    return load_flow_text(
        ROOT_WAIT.replace("MAX_WAIT", f"max_wait: {max_wait}" if max_wait else "")
    )


def _signals(db: psycopg.Connection[Any], run_id: str) -> list[tuple[str, Any, bool, Any]]:
    rows = db.execute(
        "SELECT name, payload, consumed_at IS NOT NULL, consumed_by FROM cyclone_signals"
        " WHERE run_id = %s ORDER BY id",
        (run_id,),
    ).fetchall()
    return [tuple(r) for r in rows]


def test_signal_before_the_node_waits_is_kept_then_consumed(make_client, db, schema) -> None:
    db.execute("CREATE TABLE ledger (id bigserial, run_id uuid, node text, tag text, pid int)")
    key = uuid.uuid4().hex
    client = make_client(workers=2)
    client.start()
    run_id = client.submit(APPROVAL, {"schema": schema, "key": key})
    assert engine.event(key, "entered").wait(10)
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert steps["approve"].state == "pending"  # draft is still running
    assert client.signal(run_id, "approved", {"by": "ada"}) is None  # kept
    assert _signals(db, run_id) == [("approved", {"by": "ada"}, False, None)]
    engine.event(key, "release").set()
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", client.list_steps(run_id)
    assert status.output == {"publish": {"by": "ada"}}
    assert _signals(db, run_id) == [("approved", {"by": "ada"}, True, "approve")]
    approve = next(s for s in client.list_steps(run_id) if s.node == "approve")
    assert (approve.type, approve.signal, approve.output) == (
        "wait_signal",
        "approved",
        {"by": "ada"},
    )


def test_signal_after_the_wait_started_completes_the_node_at_once(make_client, db) -> None:
    client = make_client(workers=2)
    run_id = client.submit(_flow(), {"x": 1})
    approve = next(s for s in client.list_steps(run_id) if s.node == "approve")
    assert (approve.state, approve.wait_until) == ("waiting", None)  # a root waits at submit
    assert client.signal(run_id, "go", [1, "two"]) == "approve"
    # the node completed and `after` was released in the signal's transaction
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert (steps["approve"].state, steps["approve"].output) == ("completed", [1, "two"])
    assert steps["after"].state == "available"
    client.start()
    status = client.wait(run_id, timeout=20)
    assert status.output == {"after": [1, "two"]}


def test_signal_errors_are_typed_and_write_nothing(make_client, db) -> None:
    client = make_client(payload_limits=PayloadLimits(signal_bytes=100))
    run_id = client.submit(_flow(), {"x": 1})
    with pytest.raises(PayloadTooLargeError) as info:
        client.signal(run_id, "go", "x" * 200)
    assert (info.value.kind, info.value.limit) == ("signal", 100)
    with pytest.raises(RunNotFoundError):
        client.signal(str(uuid.uuid4()), "go")
    with pytest.raises(RunNotFoundError):
        client.signal("not-a-run", "go")
    with pytest.raises(SignalRejectedError, match="no wait_signal node"):
        client.signal(run_id, "other")
    with pytest.raises(InputValidationError, match="invalid signal name"):
        client.signal(run_id, "bad name!")
    assert _signals(db, run_id) == []
    assert client.signal(run_id, "go", 1) == "approve"
    with pytest.raises(SignalRejectedError, match="no wait_signal node"):
        client.signal(run_id, "go", 2)  # consumed: nothing waits any more
    client.start()
    assert client.wait(run_id, timeout=20).state == "completed"
    with pytest.raises(RunStateError, match="running runs only"):
        client.signal(run_id, "go", 3)
    assert _signals(db, run_id) == [("go", 1, True, "approve")]


def test_second_signal_for_one_waiting_node_is_rejected(make_client, db) -> None:
    client = make_client()
    run_id = client.submit(APPROVAL, {"schema": "public", "key": "unused"})
    assert client.signal(run_id, "approved", 1) is None
    with pytest.raises(SignalRejectedError, match="has a signal kept already"):
        client.signal(run_id, "approved", 2)
    assert [s[1] for s in _signals(db, run_id)] == [1]


def _expired(db: psycopg.Connection[Any], run_id: str, node: str) -> bool:
    row = db.execute(
        "SELECT now() >= wait_until FROM cyclone_steps WHERE run_id = %s AND node = %s",
        (run_id, node),
    ).fetchone()
    return bool(row and row[0])


def test_a_signal_wait_expires_with_timeout(make_client, db) -> None:
    client = make_client()
    scanner = wait_scanner(client)
    run_id = client.submit(_flow(max_wait="300ms"), {"x": 1})
    approve = next(s for s in client.list_steps(run_id) if s.node == "approve")
    assert approve.wait_until is not None
    wait_until(lambda: _expired(db, run_id, "approve"), what="max_wait to pass")
    assert scanner.run_once().expired == 1
    assert scanner.run_once().expired == 0
    status = client.get_run(run_id)
    assert (status.state, status.error_kind) == ("failed", "step_discarded")
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert (steps["approve"].state, steps["approve"].error_kind) == ("discarded", "timeout")
    assert "signal 'go' did not arrive" in (steps["approve"].error or "")
    assert steps["after"].state == "cancelled"
    with pytest.raises(RunStateError):
        client.signal(run_id, "go")


def test_max_signal_wait_of_the_submitting_client_caps_a_node_without_max_wait(
    make_client, db
) -> None:
    submitter = make_client(max_signal_wait=0.3)
    uncapped = make_client()  # 0: no cap
    capped = submitter.submit(_flow(), {"x": 1})
    free = uncapped.submit(_flow(), {"x": 1})
    assert next(s for s in uncapped.list_steps(free) if s.node == "approve").wait_until is None
    wait_until(lambda: _expired(db, capped, "approve"), what="max_signal_wait to pass")
    # whichever client scans, the submitting client's cap applies
    assert wait_scanner(uncapped).run_once().expired == 1
    assert uncapped.get_run(capped).state == "failed"
    assert uncapped.get_run(free).state == "running"


@pytest.mark.parametrize("value", [True, "1s", float("nan"), 10**9])
def test_max_signal_wait_is_validated(make_client, value: Any) -> None:
    with pytest.raises(ConfigError, match="max_signal_wait"):
        make_client(max_signal_wait=value)


def test_many_clients_scan_at_once_and_each_wait_expires_once(make_client, db) -> None:
    clients = [make_client() for _ in range(4)]
    runs = [clients[0].submit(_flow(max_wait="200ms"), {"i": i}) for i in range(12)]
    wait_until(lambda: all(_expired(db, r, "approve") for r in runs), what="every wait to expire")
    counts: list[int] = []
    barrier = threading.Barrier(len(clients))

    def scan(client: Any) -> None:
        barrier.wait()
        counts.append(wait_scanner(client).run_once().expired)

    threads = [threading.Thread(target=scan, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(counts) == len(runs)
    assert all(clients[0].get_run(r).error_kind == "step_discarded" for r in runs)


DEADLINE = load_flow_text(
    """
name: deadline
deadline: 400ms
nodes:
  slow:
    call: cyclone_test_handlers.node_types:wait_cancelled
  later:
    call: cyclone_test_handlers.basic:echo
    needs: [slow]
"""
)


def test_a_run_past_its_deadline_fails_and_its_steps_are_cancelled(make_client, db) -> None:
    client = make_client(workers=1)
    client.start()
    run_id = client.submit(DEADLINE, {"seconds": 30})
    assert client.get_run(run_id).deadline_at is not None
    wait_until(
        lambda: next(s for s in client.list_steps(run_id) if s.node == "slow").state == "running",
        what="the step to run",
    )
    scanners = [deadline_scanner(client) for _ in range(3)]
    wait_until(
        lambda: (
            db.execute(
                "SELECT now() >= deadline_at FROM cyclone_runs WHERE id = %s", (run_id,)
            ).fetchone()
            == (True,)
        ),
        what="the deadline to pass",
    )
    counts: list[int] = []
    threads = [
        threading.Thread(target=lambda s=s: counts.append(s.run_once().failed)) for s in scanners
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(counts) == [0, 0, 1]  # exactly one scanner failed it
    status = client.get_run(run_id)
    assert (status.state, status.error_kind) == ("failed", "deadline")
    assert "deadline" in (status.error or "")
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert (steps["slow"].state, steps["later"].state) == ("cancelled", "cancelled")
    wait_until(lambda: client.in_flight() == 0, what="the handler to learn it")


def test_the_maintenance_loop_runs_the_scanners(make_client) -> None:
    client = make_client(workers=1, sweep_interval=0.05)
    client.start()
    run_id = client.submit(DEADLINE, {"seconds": 30})
    status = client.wait(run_id, timeout=20)
    assert (status.state, status.error_kind) == ("failed", "deadline")
    wait_run = client.submit(_flow(max_wait="100ms"), {"x": 1})
    status = client.wait(wait_run, timeout=20)
    assert (status.state, status.error_kind) == ("failed", "step_discarded")

"""Why a step waits: ``Client.explain`` against a real Postgres, one test per
reason, each with the fields ``status`` shows (claimable_at, needs, signal and deadline,
the holder of a sequence, the max_parallel bound, the queue without a live worker), so
that ``status`` says more than ``available`` for a delayed run and ``available 2/5``
for a retry in backoff."""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers.engine import database
from helpers.procs import wait_until

from cyclone_flow import Client, RunNotFoundError
from cyclone_flow.db import workers
from cyclone_flow.explain import WaitReason, explain, read_snapshot
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.states import RunState, StepState

NOOP = "cyclone_test_handlers.queueing:noop"
CHAIN = load_flow_text(
    f"name: chain\nnodes:\n  a: {{call: '{NOOP}', queue: parked}}\n"
    f"  b: {{call: '{NOOP}', queue: parked}}\n"
    f"  c: {{call: '{NOOP}', queue: parked, needs: [a, b]}}\n"
)
ONE = load_flow_text(f"name: one\nnodes:\n  s: {{call: '{NOOP}', queue: parked}}\n")


def _fake_worker(client: Client, queue: str, client_id: str = "fake-worker") -> None:
    """A live heartbeat row serving ``queue`` with no claim loop behind it (a worker
    whose slots are all busy, as the explanation sees it)."""
    with database(client).session() as s:
        workers.worker_upsert(
            s,
            client_id=client_id,
            hostname="host",
            pid=1,
            queues={queue: 1},
            only_run=None,
            lease_ttl_s=30.0,
            version="test",
        )


def test_unfinished_needs_and_no_live_worker(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run_id = client.submit(CHAIN)
    why = client.explain(run_id)
    assert set(why) == {"a", "b", "c"}
    assert why["c"].reason is WaitReason.NEEDS and why["c"].needs == ("a", "b")
    assert why["c"].text == "waits for a (available), b (available)"
    a = why["a"]
    assert a.reason is WaitReason.NO_WORKER and a.served is False and a.queue == "parked"
    assert a.claimable_at is not None
    assert "no live worker serves queue 'parked'" in a.text
    # the hint is a command that works: a worker needs its allow-list
    package = NOOP.partition(":")[0].split(".")[0]
    assert f"cyclone-flow worker --queue parked --allow-module {package}" in a.text, a.text
    _fake_worker(client, "parked")
    assert client.explain(run_id)["a"].reason is WaitReason.QUEUED


def test_a_worker_of_another_queue_or_dead_does_not_serve(
    make_client: Callable[..., Client],
) -> None:
    client = make_client(worker_queues={"other": 1})
    client.start()
    run_id = client.submit(ONE)
    assert client.explain(run_id)["s"].reason is WaitReason.NO_WORKER
    _fake_worker(client, "parked")
    (fake,) = [w for w in client.workers() if w.client_id == "fake-worker"]
    later = fake.heartbeat_at + timedelta(seconds=31)  # past its 30 s lease TTL: dead
    assert client.explain(run_id, now=later)["s"].reason is WaitReason.NO_WORKER
    assert client.explain(run_id)["s"].reason is WaitReason.QUEUED


def test_a_delayed_run_says_when_it_becomes_claimable(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run_id = client.submit(ONE, delay=3600)
    (step,) = client.list_steps(run_id)
    assert step.state is StepState.AVAILABLE  # what status showed, and nothing more
    w = client.explain(run_id)["s"]
    assert w.reason is WaitReason.DELAYED and w.claimable_at == step.scheduled_at
    assert "claimable at" in w.text and re.search(r"\(in (59 min \d\d s|1 h 00 min)\)", w.text)
    assert w.as_dict()["claimable_at"] == step.scheduled_at.isoformat()


def test_a_retry_in_backoff_says_when_it_is_claimable(make_client: Callable[..., Client]) -> None:
    flow = load_flow_text(
        "name: flaky\nnodes:\n  s:\n    call: cyclone_test_handlers.basic:boom\n"
        "    retry: {max_attempts: 5, backoff: {initial: 1h, max: 2h}}\n"
    )
    client = make_client()
    run_id = client.submit(flow)
    client.start()
    (step,) = wait_until(
        lambda: [s for s in client.list_steps(run_id) if s.attempt == 2], what="a retry"
    )
    w = client.explain(run_id)["s"]
    assert w.reason is WaitReason.BACKOFF and w.claimable_at == step.scheduled_at
    assert w.served is True  # the started client serves the default queue
    assert w.text.startswith("retry 2/5 in backoff; claimable at ")


def test_a_signal_wait_names_the_signal_and_its_deadline(
    make_client: Callable[..., Client],
) -> None:
    flow = load_flow_text(
        "name: approve\nnodes:\n  ok: {type: wait_signal, signal: approved, max_wait: 1h}\n"
        f"  go: {{call: '{NOOP}', needs: [ok]}}\n"
    )
    client = make_client()
    run_id = client.submit(flow)
    why = client.explain(run_id)
    ok = why["ok"]
    (step,) = [s for s in client.list_steps(run_id) if s.node == "ok"]
    assert ok.reason is WaitReason.SIGNAL and ok.signal == "approved"
    assert f"cyclone-flow signal {run_id} approved" in ok.text, ok.text  # not a placeholder
    assert ok.deadline is not None and ok.deadline == step.wait_until
    assert ok.as_dict()["deadline"] == step.wait_until.isoformat()  # type: ignore[union-attr]
    assert why["go"].needs == ("ok",)


def test_a_fan_out_at_max_parallel(make_client: Callable[..., Client]) -> None:
    flow = load_flow_text(
        "name: fan\nnodes:\n  each:\n    type: fan_out\n    over: [1, 2, 3, 4, 5]\n"
        f"    call: {NOOP}\n    max_parallel: 2\n    queue: parked\n"
    )
    client = make_client()
    run_id = client.submit(flow)
    node = client.explain(run_id)["each"]
    assert node.reason is WaitReason.NO_WORKER  # 2 items claimable, nobody serves them
    _fake_worker(client, "parked")
    why = client.explain(run_id, items=True)
    assert why["each"].reason is WaitReason.MAX_PARALLEL
    assert (why["each"].max_parallel, why["each"].active) == (2, 2)
    assert "max_parallel 2 reached (2 available or running, 3 held back)" in why["each"].text
    assert why["each[4]"].reason is WaitReason.MAX_PARALLEL and why["each[4]"].active == 2
    assert why["each[0]"].reason is WaitReason.QUEUED


def test_a_held_sequence_names_the_run_that_holds_it(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    first = client.submit(ONE, sequence="nightly")
    second = client.submit(ONE, sequence="nightly")
    assert client.explain(first)["s"].reason is WaitReason.NO_WORKER
    w = client.explain(second)["s"]
    assert w.reason is WaitReason.SEQUENCE and w.holder_run_id == first
    assert f"until run {first} completes or is cancelled" in w.text


def test_a_child_node_names_its_child_run(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    (tmp_path / "child.yaml").write_text(
        f"name: kid\nnodes:\n  k: {{call: '{NOOP}', queue: parked}}\n"
    )
    parent = tmp_path / "parent.yaml"
    parent.write_text("name: parent\nnodes:\n  sub: {type: child, flow: child.yaml}\n")
    client = make_client()
    run_id = client.submit(str(parent))
    w = client.explain(run_id)["sub"]
    (step,) = client.list_steps(run_id)
    assert w.reason is WaitReason.CHILD_RUN and w.child_run_id == step.child_run_id
    assert client.explain(str(w.child_run_id))["k"].reason is WaitReason.NO_WORKER


def test_running_and_finished_steps_are_not_explained(make_client: Callable[..., Client]) -> None:
    client = make_client(worker_queues={"parked": 1})
    run_id = client.submit(ONE)
    client.start()
    assert client.wait(run_id, timeout=10).state is RunState.COMPLETED
    assert client.explain(run_id) == {}
    with pytest.raises(RunNotFoundError):
        client.explain(str(uuid.uuid4()))


def test_unfinished_steps_of_an_ended_run_and_a_release_in_progress(
    make_client: Callable[..., Client],
) -> None:
    """Rows no transaction leaves behind for long (a run that ended with an unfinished
    step; a pending step whose needs are done), explained from a snapshot built from
    the real rows of a run."""
    client = make_client()
    run_id = client.submit(CHAIN)
    with database(client).session() as s:
        snap = read_snapshot(s, run_id)
    assert snap is not None
    a, b, c = snap.steps
    done = [dataclasses.replace(x, state=StepState.COMPLETED) for x in (a, b)]
    starting = explain(dataclasses.replace(snap, steps=[*done, c]))
    assert starting["c"].reason is WaitReason.STARTING
    ended = dataclasses.replace(snap, run=dataclasses.replace(snap.run, state=RunState.FAILED))
    assert {w.reason for w in explain(ended).values()} == {WaitReason.RUN_ENDED}


def test_a_never_claimed_step_of_a_call_given_back_elsewhere_cannot_import(
    make_client: Callable[..., Client], db: Any
) -> None:
    """The live worker skips a call it gave back (it cannot import it): a step of that
    call it never claimed waits for the same reason, not for "a free worker"."""
    client = make_client()
    first, second = client.submit(ONE), client.submit(ONE)
    _fake_worker(client, "parked")
    reason = f"no live worker can import {NOOP}: worker fake-worker: cannot import module"
    given_back = (
        "UPDATE cyclone_steps SET import_wait_reason = %s, import_wait_since = now(),"
        " scheduled_at = now() + %s * interval '1 second' WHERE run_id = %s"
    )
    db.execute(given_back, (reason, 1, first))  # as step_give_back_if_leased leaves it
    why = client.explain(second)["s"]
    assert why.reason is WaitReason.CANNOT_IMPORT, why
    assert why.text.startswith(f"{reason} (another step of {NOOP} was given back"), why.text
    assert why.served is True and why.since is None
    assert client.explain(first)["s"].reason is WaitReason.CANNOT_IMPORT  # its own reason
    # a give-back long ago (no live worker tries that call any more) explains nothing
    db.execute(given_back, (reason, -120, first))
    assert client.explain(second)["s"].reason is WaitReason.QUEUED

"""``Client.run_view`` (cyclone_flow/run_view.py) against a real Postgres: it reads what
the separate reads read (run, steps, item progress, wait reasons, queue facts, log tail,
definition), raises as ``get_run`` does, and reads it all in one snapshot: while steps
complete one transaction after another, no view shows a step ahead of its run or a
fan-out node's count ahead of its items."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from helpers.engine import claim, complete_step, database

from cyclone_flow import Client, RunNotFoundError
from cyclone_flow.explain import WaitReason
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.run_view import RunView
from cyclone_flow.states import RunState, StepState

SQUARE = "cyclone_test_handlers.node_types:square"
FLOW = load_flow_text(
    f"""
name: view
nodes:
  each:
    type: fan_out
    over: "${{{{ run.input.items }}}}"
    call: {SQUARE}
  last: {{call: {SQUARE}, needs: [each]}}
"""
)
RUNS = 40
ITEMS = 10
VIEW_TIMEOUT_S = 30.0


def test_a_view_reads_what_the_separate_reads_read(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run_id = client.submit(FLOW, {"items": [1, 2, 3]}, unique_key="view-1")
    view = client.run_view(run_id, definition=True, logs=5)
    assert isinstance(view, RunView)
    assert view.run == client.get_run(run_id)
    assert list(view.steps) == client.list_steps(run_id, items=False)
    assert dict(view.progress) == client.count_items(run_id) == {"each": {"available": 3}}
    assert view.waiting == client.explain(run_id)
    assert view.waiting["last"].reason is WaitReason.NEEDS
    assert view.queue.as_dict() == client.get_queue_info(run_id)
    assert view.queue.unique_key == "view-1" and view.queue.unique_held
    assert view.definition == client.get_run_definition(run_id)
    assert list(view.log_tail) == client.list_step_log_tail(run_id, 5) == []
    each = view.step("each")
    assert each is not None and each.items_total == 3
    with_items = client.run_view(run_id, items=True)
    assert len(with_items.steps) == 5 and with_items.definition is None
    with pytest.raises(AttributeError):  # frozen
        view.run = view.run  # type: ignore[misc]


@pytest.mark.parametrize("bad", ["not-a-run", "00000000-0000-4000-8000-000000000000"])
def test_an_unknown_run_raises_as_get_run_does(
    make_client: Callable[..., Client], bad: str
) -> None:
    client = make_client()
    with pytest.raises(RunNotFoundError):
        client.get_run(bad)
    with pytest.raises(RunNotFoundError):
        client.run_view(bad)


def _ahead(view: RunView) -> str | None:
    """What a view shows that the engine's transactions never leave behind; None when
    nothing. The last step's completion completes the run (``run_complete_if_done``),
    an item's completion counts it on its fan-out node (``step_add_items_done_if_waiting``)
    and the fan-out node's completion releases ``last`` (engine/advance.py), each in the
    one transaction."""
    run, each, last = view.run, view.step("each"), view.step("last")
    assert each is not None and last is not None
    unfinished = [s.node for s in view.steps if not s.state.terminal]
    if (run.state is RunState.RUNNING) != bool(unfinished):
        return f"run {run.state} with unfinished steps {unfinished}"
    if each.items_total is not None and each.state is StepState.WAITING:
        done = view.progress.get("each", {}).get("completed", 0)
        if done != each.items_done:
            return f"each counts {each.items_done} items done, {done} items completed"
    if each.state is StepState.COMPLETED and last.state is StepState.PENDING:
        return "each completed, last still pending"
    return None


def test_no_view_shows_a_step_ahead_of_its_run(make_client: Callable[..., Client]) -> None:
    """A reader takes views in a tight loop while the test completes every item and step
    of ``RUNS`` runs, each in its own transaction (the engine's completion); a reader of
    the run and its steps in two transactions sees the run running with every step
    finished, or a fan-out count ahead of its items, within a few runs."""
    client = make_client()
    current: dict[str, Any] = {"run": None}
    seen = threading.Event()  # the reader took a view of the current run
    stop = threading.Event()
    wrong: list[str] = []
    views = [0]

    def reader() -> None:
        while not stop.is_set():
            rid = current["run"]
            if rid is None:
                stop.wait(0.001)  # (yield the core) until the first run is submitted
                continue
            try:
                view = client.run_view(rid)
                views[0] += 1
                if (problem := _ahead(view)) is not None:
                    wrong.append(problem)
            except Exception as exc:  # failed below, with the test's own message
                wrong.append(repr(exc))
            seen.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for _ in range(RUNS):
            rid = client.submit(FLOW, {"items": list(range(ITEMS))})
            seen.clear()
            current["run"] = rid
            assert seen.wait(VIEW_TIMEOUT_S), "the reader took no view"
            while True:
                claimed = claim(client, "w", 30.0, ["default"], 1, run_id=rid)
                if not claimed:
                    break
                with database(client).pool.connection() as conn, conn.transaction():
                    assert complete_step(client, conn, claimed[0], "w", "1") is not None
            assert client.get_run(rid).state is RunState.COMPLETED
            seen.clear()
            assert seen.wait(VIEW_TIMEOUT_S), "the reader took no view of the end"
    finally:
        stop.set()
        thread.join(VIEW_TIMEOUT_S)
    assert not thread.is_alive()
    assert views[0] >= RUNS * 2
    assert wrong == [], f"{len(wrong)} of {views[0]} views mixed two moments: {wrong[:3]}"

"""The CLI's live run progress (cyclone_flow/cli/progress.py) on a real run: a rich bar
with steps done/total on a terminal, one plain line per finished step otherwise."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import replace

import pytest
from rich.console import Console

from cyclone_flow import Client, Step, StepState
from cyclone_flow.cli.progress import PlainLines, follow_run
from cyclone_flow.flowfile import load_flow_text

FLOW = load_flow_text(
    """
name: progress
nodes:
  a: {call: 'cyclone_test_handlers.basic:echo'}
  b:
    call: cyclone_test_handlers.ops:flaky
    needs: [a]
    retry: {max_attempts: 2, backoff: {initial: 0s}}
  c: {call: 'cyclone_test_handlers.ops:always_fails', needs: [a]}
  d: {call: 'cyclone_test_handlers.basic:echo', needs: [b]}
"""
)


def _run(make_client: Callable[..., Client]) -> tuple[Client, str]:
    client = make_client(workers=2, allow_modules=["cyclone_test_handlers"])
    run_id = client.submit(FLOW, {"succeed_on": 2})
    client.start()
    return client, run_id


def test_terminal_shows_a_bar_of_steps_done_over_total(
    make_client: Callable[..., Client],
) -> None:
    client, run_id = _run(make_client)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    status = follow_run(client, run_id, console=console, interval=0.05)
    assert status.state == "failed"  # c is discarded and fails the run
    text = out.getvalue()
    assert f"run {run_id[:8]}" in text
    assert "4/4" in text
    assert "failed" in text


def test_not_a_terminal_prints_plain_lines(make_client: Callable[..., Client]) -> None:
    client, run_id = _run(make_client)
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    status = follow_run(client, run_id, console=console, interval=0.05)
    lines = out.getvalue().splitlines()
    assert "  step a completed" in lines
    assert "  step c discarded: RuntimeError: always fails" in lines
    assert "\x1b[" not in out.getvalue(), "no terminal escapes in plain output"
    # every step that ended is reported once
    ended = [line for line in lines if line.startswith("  step ") and "attempt" not in line]
    assert len(ended) == len({line.split()[1] for line in ended})
    assert status.state == "failed"


def test_quiet_only_waits(make_client: Callable[..., Client]) -> None:
    client, run_id = _run(make_client)
    out = io.StringIO()
    status = follow_run(client, run_id, console=Console(file=out), quiet=True)
    assert status.state.terminal and out.getvalue() == ""


@pytest.mark.parametrize("terminal", [True, False])
def test_unknown_run_is_an_error(make_client: Callable[..., Client], terminal: bool) -> None:
    from cyclone_flow import RunNotFoundError

    client = make_client()
    console = Console(file=io.StringIO(), force_terminal=terminal)
    with pytest.raises(RunNotFoundError):
        follow_run(client, "00000000-0000-0000-0000-000000000000", console=console)


FAN = load_flow_text(
    """
name: fan
nodes:
  a: {call: 'cyclone_test_handlers.basic:echo'}
  price:
    type: fan_out
    needs: [a]
    over: [1, 2, 3, 4, 5, 6]
    call: cyclone_test_handlers.basic:echo
  summary: {call: 'cyclone_test_handlers.basic:echo', needs: [price]}
"""
)


def test_plain_lines_sum_up_fan_out_items_at_most_every_few_seconds(
    make_client: Callable[..., Client],
) -> None:
    client = make_client(workers=2, allow_modules=["cyclone_test_handlers"])
    run_id = client.submit(FAN, {})
    client.start()
    assert client.wait(run_id, timeout=30).state == "completed"
    final = client.list_steps(run_id)

    def stage(done: int) -> list[Step]:
        """The run's real rows as they were when ``done`` items had completed."""
        out = []
        for s in final:
            if s.parent_node == "price" and (s.item_index or 0) >= done:
                s = replace(s, state=StepState.AVAILABLE, finished_at=None)
            elif s.node in ("price", "summary"):
                s = replace(s, state=StepState.WAITING, finished_at=None)
            out.append(s)
        return out

    # a look that sees the items before any of them ended: the need that started the
    # fan-out is told first, then 0/6
    assert PlainLines().changes(stage(0)) == [
        "  step a completed",
        "  step price: 0/6 items completed",
    ]
    now = [0.0]
    lines = PlainLines(summary_every_s=5.0, clock=lambda: now[0])
    assert lines.changes(stage(2)) == ["  step a completed", "  step price: 2/6 items completed"]
    now[0] = 1.0
    assert lines.changes(stage(4)) == []  # 4/6 within the pause: not yet
    now[0] = 3.0
    assert lines.changes(stage(4)) == []
    now[0] = 6.0
    assert lines.changes(stage(4)) == ["  step price: 4/6 items completed"]  # after the pause
    now[0] = 6.5
    assert lines.changes(final) == [  # the node ended: its last summary, then the node
        "  step price: 6/6 items completed",
        "  step price completed",
        "  step summary completed",
    ]


@pytest.mark.parametrize("terminal", [True, False])
def test_each_look_reads_the_run_and_its_steps_in_one_view(
    make_client: Callable[..., Client], monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    # one snapshot per look (Client.run_view): the run's state and the steps shown with it
    # are of one moment, not two reads
    client, run_id = _run(make_client)
    views = []
    run_view = client.run_view

    def one_view(*args: object, **kwargs: object) -> object:
        views.append(kwargs.get("items"))
        return run_view(*args, **kwargs)  # type: ignore[arg-type]

    def second_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("a look read the steps apart from the run")

    monkeypatch.setattr(client, "run_view", one_view)
    monkeypatch.setattr(client, "list_steps", second_read)
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200, color_system=None)
    status = follow_run(client, run_id, console=console, interval=0.05)
    assert status.state == "failed"
    assert views and set(views) == {True}  # with the fan-out items, as the lines sum them up

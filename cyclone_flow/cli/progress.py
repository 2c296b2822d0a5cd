"""Live progress of one run for the CLI (``cyclone-flow run``; reusable by any command
that waits for a run, such as ``submit --wait``).

:func:`follow_run` waits for the run and reads its steps from the database every
``interval`` seconds, so it shows the same thing whichever process executes the steps.
On a terminal it draws a rich progress bar (steps done/total, running, failed attempts);
otherwise it prints one plain line per step that finishes or fails an attempt, which
reads well in CI logs and pipes. Fan-out item steps count like any other step row.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cyclone_flow.db.errors import ride_out
from cyclone_flow.db.rows import Run, Step
from cyclone_flow.errors import WaitTimeoutError
from cyclone_flow.states import StepState

if TYPE_CHECKING:
    from cyclone_flow.client import Client

T = TypeVar("T")

_TERMINAL = (StepState.COMPLETED, StepState.DISCARDED, StepState.CANCELLED)


@dataclass
class StepCounts:
    """What a progress display shows: steps ``done`` (completed, discarded or cancelled)
    of ``total``, ``running`` now, and ``failed`` attempts so far."""

    total: int = 0
    done: int = 0
    running: int = 0
    failed: int = 0

    @classmethod
    def of(cls, steps: list[Step]) -> StepCounts:
        return cls(
            total=len(steps),
            done=sum(s.state in _TERMINAL for s in steps),
            running=sum(s.state == StepState.RUNNING for s in steps),
            failed=sum(len(s.errors) for s in steps),
        )


@dataclass
class PlainLines:
    """Turns successive snapshots of a run's steps into one line per change: a step that
    finished (``completed``, ``discarded``, ``cancelled``) or failed an attempt and will
    be retried."""

    seen: dict[int, tuple[str, int]] = field(default_factory=dict)

    def changes(self, steps: list[Step]) -> list[str]:
        lines = []
        for s in steps:
            before = self.seen.get(s.id)
            now = (str(s.state), s.attempt)
            self.seen[s.id] = now
            if before == now:
                continue
            prev_state, prev_attempt = before if before else ("", 1)
            if s.attempt > prev_attempt and s.state not in _TERMINAL:
                lines.append(f"  step {s.node} attempt {s.attempt - 1} failed: {s.error}")
            if s.state in _TERMINAL and prev_state != str(s.state):
                why = f": {s.error}" if s.error and s.state != StepState.COMPLETED else ""
                lines.append(f"  step {s.node} {s.state}{why}")
        return lines


def follow_run(
    client: Client,
    run_id: str,
    *,
    console: Console | None = None,
    quiet: bool = False,
    interval: float = 0.25,
    timeout: float | None = None,
) -> Run:
    """Block until run ``run_id`` is terminal and return its final status, showing
    progress on ``console`` (default: stderr) unless ``quiet``: a live bar when the
    console is a terminal, plain lines otherwise. ``KeyboardInterrupt`` propagates (the
    display is closed first). The database going away (a restart, a short outage) is
    ridden out as :meth:`Client.wait <cyclone_flow.Client.wait>` does. Raises
    RunNotFoundError for an unknown run, WaitTimeoutError when ``timeout`` seconds (None:
    no limit) pass first, and the last database error when the database stayed out of
    reach until the timeout (or for ``OUTAGE_GRACE_S`` without one)."""
    console = console if console is not None else Console(stderr=True, highlight=False)
    if quiet:
        return client.wait(run_id, timeout=timeout)
    waiter = _Waiter(client, run_id, interval, timeout)
    if console.is_terminal:
        return _follow_bar(client, run_id, console, waiter)
    return _follow_plain(client, run_id, console, waiter)


class _Waiter:
    """Waits a little at a time: the run's status once it is terminal or ``interval``
    seconds passed; raises WaitTimeoutError past ``timeout``."""

    def __init__(self, client: Client, run_id: str, interval: float, timeout: float | None):
        self.client, self.run_id, self.interval, self.timeout = client, run_id, interval, timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout

    def next(self) -> Run:
        return self.ride(self._next)

    def ride(self, call: Callable[[], T]) -> T:
        """``call()``, through database outages up to the deadline (:func:`ride_out`)."""
        return ride_out(call, deadline=self.deadline)

    def _next(self) -> Run:
        step = self.interval
        if self.deadline is not None:
            step = max(0.0, min(step, self.deadline - time.monotonic()))
        try:
            return self.client.wait(self.run_id, timeout=step)
        except WaitTimeoutError:
            status = self.client.get_run(self.run_id)
            if self.deadline is not None and time.monotonic() >= self.deadline:
                assert self.timeout is not None
                raise WaitTimeoutError(self.run_id, self.timeout, str(status.state)) from None
            return status


def _follow_plain(client: Client, run_id: str, console: Console, waiter: _Waiter) -> Run:
    lines = PlainLines()
    while True:
        status = waiter.next()
        for line in lines.changes(waiter.ride(lambda: client.list_steps(run_id))):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        if status.state.terminal:
            return status


def _follow_bar(client: Client, run_id: str, console: Console, waiter: _Waiter) -> Run:
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("steps  {task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    # no redirect of sys.stdout/stderr: a handler's prints go to its step logs (the
    # worker's proxies, cyclone_flow.worker.step_logs), not above the bar
    with Progress(
        *columns, console=console, transient=False, redirect_stdout=False, redirect_stderr=False
    ) as progress:
        task = progress.add_task(f"run {run_id[:8]}", total=None, detail="")
        while True:
            status = waiter.next()
            counts = StepCounts.of(waiter.ride(lambda: client.list_steps(run_id)))
            detail = f"{counts.running} running"
            if counts.failed:
                detail += f", {counts.failed} failed attempt(s)"
            if status.state.terminal:
                detail = str(status.state)
            progress.update(task, total=counts.total, completed=counts.done, detail=detail)
            if status.state.terminal:
                return status

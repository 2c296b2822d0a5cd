"""Live progress of one run for the CLI (``cyclone-flow run``; reusable by any command
that waits for a run, such as ``submit --wait``).

:func:`follow_run` waits for the run and reads its steps from the database every
``interval`` seconds, so it shows the same thing whichever process executes the steps.
On a terminal it draws a rich progress bar (steps done/total, running, failed attempts);
otherwise it prints plain lines (:class:`PlainLines`: each step that finishes or fails
an attempt, in the order it happened, and a periodic summary of a fan-out node's items),
which read well in CI logs and pipes. On the bar, fan-out item steps count like any
other step row, and each failed attempt of the run's own nodes is told by one line above
it. While it shows progress, the process's log records go through the display
(:func:`logs_above`), without the worker's own lines about what the display tells.
"""

from __future__ import annotations

import functools
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from cyclone_flow.cli.common import echo_json
from cyclone_flow.cli.show import run_dict
from cyclone_flow.db.errors import Outage, database_lost
from cyclone_flow.db.rows import Run, Step
from cyclone_flow.describe import short_id
from cyclone_flow.errors import WaitTimeoutError
from cyclone_flow.explain import WaitReason
from cyclone_flow.logs import EVENT_FIELD
from cyclone_flow.states import StepState

if TYPE_CHECKING:
    from cyclone_flow.client import Client

T = TypeVar("T")

_TERMINAL = (StepState.COMPLETED, StepState.DISCARDED, StepState.CANCELLED, StepState.SKIPPED)


@dataclass
class StepCounts:
    """What a progress display shows: steps ``done`` (completed, discarded, cancelled or
    skipped) of ``total``, ``running`` now, ``failed`` attempts so far, and how many of
    the done steps were ``discarded``, ``cancelled`` or ``skipped`` (so that a full bar
    does not read as all completed)."""

    total: int = 0
    done: int = 0
    running: int = 0
    failed: int = 0
    discarded: int = 0
    cancelled: int = 0
    skipped: int = 0

    @classmethod
    def of(cls, steps: Sequence[Step]) -> StepCounts:
        return cls(
            total=len(steps),
            done=sum(s.state in _TERMINAL for s in steps),
            running=sum(s.state == StepState.RUNNING for s in steps),
            failed=sum(len(s.errors) for s in steps),
            discarded=sum(s.state == StepState.DISCARDED for s in steps),
            cancelled=sum(s.state == StepState.CANCELLED for s in steps),
            skipped=sum(s.state == StepState.SKIPPED for s in steps),
        )

    def not_completed(self) -> str:
        """``", 1 discarded, 2 cancelled, 1 skipped"`` (the parts that are not zero), or
        ``""``."""
        counts = (
            (self.discarded, "discarded"),
            (self.cancelled, "cancelled"),
            (self.skipped, "skipped"),
        )
        parts = [f"{n} {what}" for n, what in counts if n]
        return "".join(f", {part}" for part in parts)


@dataclass
class _Seen:
    """What :class:`PlainLines` reported of one step: its state and error count."""

    state: str
    errors: int


@dataclass
class _ItemTally:
    """The items of one fan-out node as last summarised: the summary line and when."""

    line: str = ""
    at: float = -math.inf


SUMMARY_EVERY_S = 5.0
"""Seconds between two summary lines of one fan-out node's items in plain progress (a
last one is printed when the node ends)."""


@dataclass
class PlainLines:
    """Turns successive snapshots of a run's steps (with fan-out items) into lines, in
    the order things happened (by the database's timestamps, so a node's completion comes
    before its dependents' and items before their fan-out node):

    - ``  step NODE attempt N failed: ERROR`` for each failed attempt that was retried,
      read from the step's error history, so an attempt that failed and was retried
      between two snapshots is still reported;
    - ``  step NODE completed`` (``discarded: ERROR``, ``cancelled``) when a step ends;
    - for the items of a fan-out node no line each, but ``  step NODE: 3/10 items
      completed`` (with the discarded items and failed attempts, if any), at most every
      ``summary_every_s`` seconds and once more when the node ends.

    ``clock`` (monotonic seconds) paces the summaries (tests pass their own). With
    ``failures_only`` (the lines above a progress bar, which counts the rest) only the
    failed attempts and the discarded steps of the run's own nodes are told."""

    summary_every_s: float = SUMMARY_EVERY_S
    clock: Callable[[], float] = time.monotonic
    failures_only: bool = False
    seen: dict[int, _Seen] = field(default_factory=dict)
    tallies: dict[str, _ItemTally] = field(default_factory=dict)

    def changes(self, steps: Sequence[Step]) -> list[str]:
        """The lines for what changed since the previous snapshot, oldest first."""
        events: list[tuple[datetime, int, int, str]] = []  # (when, rank, step id, line)
        changed_items: dict[str, datetime] = {}
        for s in steps:
            before = self.seen.get(s.id, _Seen("", 0))
            self.seen[s.id] = _Seen(str(s.state), len(s.errors))
            new_errors = s.errors[before.errors :] if len(s.errors) >= before.errors else []
            ended = s.state in _TERMINAL and before.state != str(s.state)
            if s.parent_node is not None:
                if new_errors or ended:
                    last = max([_at(e, s) for e in new_errors] + ([_end(s)] if ended else []))
                    changed_items[s.parent_node] = max(last, changed_items.get(s.parent_node, last))
                continue
            for entry in new_errors:
                final = s.state == StepState.DISCARDED and entry is s.errors[-1]
                if not final:  # the discarded line below carries the last error
                    line = f"  step {s.node} attempt {entry.get('attempt')} failed: "
                    events.append((_at(entry, s), 0, s.id, line + str(entry.get("error"))))
            if ended and not (self.failures_only and s.state != StepState.DISCARDED):
                why = f": {s.error}" if s.error and s.state != StepState.COMPLETED else ""
                events.append((_end(s), 2, s.id, f"  step {s.node} {s.state}{why}"))
        if self.failures_only:
            events.sort(key=lambda e: e[:3])
            return [line for *_, line in events]
        now = self.clock()
        items: dict[str, list[Step]] = {}
        for s in steps:
            if s.parent_node is not None:
                items.setdefault(s.parent_node, []).append(s)
        for node in steps:
            if node.type != "fan_out" or node.parent_node is not None:
                continue
            mine = items.get(node.node, [])
            ended = any(e[2] == node.id and e[1] == 2 for e in events)
            tally = self.tallies.setdefault(node.node, _ItemTally())
            if not mine:
                continue  # not started (or no items): nothing to sum up
            line = _summary(node, mine)
            if line == tally.line or not (ended or now - tally.at >= self.summary_every_s):
                continue  # a summary changed within the pause is printed after it
            tally.line, tally.at = line, now
            # no item ended yet: after the other lines of this look (the need that
            # started the fan-out ends before it), never first
            after_all = max((e[0] for e in events if e[0] != _LATEST), default=_EARLIEST)
            latest = changed_items.get(node.node) or max(
                (i.finished_at for i in mine if i.finished_at),
                default=after_all + timedelta(microseconds=1),
            )
            events.append((_end(node) if ended else latest, 1, node.id, line))
        events.sort(key=lambda e: e[:3])
        return [line for *_, line in events]


_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


def _end(step: Step) -> datetime:
    return step.finished_at or _LATEST


def _at(entry: dict[str, Any], step: Step) -> datetime:
    """When an attempt failed (the error entry's ``at``); the step's end if unreadable."""
    try:
        return datetime.fromisoformat(str(entry["at"]))
    except (KeyError, ValueError):
        return _end(step)


def _summary(node: Step, items: list[Step]) -> str:
    total = node.items_total if node.items_total is not None else len(items)
    done = sum(s.state == StepState.COMPLETED for s in items)
    line = f"  step {node.node}: {done}/{total} items completed"
    discarded = sum(s.state == StepState.DISCARDED for s in items)
    failed = sum(len(s.errors) for s in items) - discarded
    if discarded:
        line += f", {discarded} discarded"
    if failed > 0:
        line += f", {failed} failed attempt{'s' if failed > 1 else ''} retried"
    return line


UNSERVED_NOTICE_S = 3.0
"""Seconds a wait for a run (``submit --wait``, ``rerun --wait``, ``enqueue --wait``)
goes before it looks, and then how often it looks again, for steps that no live worker
serves (:class:`UnservedNotice`)."""


class UnservedNotice:
    """Says, once per step, which steps of run ``run_id`` no live worker serves: from
    ``after_s`` seconds on, every ``after_s`` seconds, a :meth:`check` reads
    :meth:`Client.explain` and hands ``say`` the line ``status`` prints for each new
    ``no_worker`` reason (``waiting: NODE: claimable since ..., but no live worker serves
    queue 'q' (start one: ...)``) with ``; still waiting``."""

    def __init__(
        self,
        client: Client,
        run_id: str,
        say: Callable[[str], None],
        after_s: float = UNSERVED_NOTICE_S,
    ) -> None:
        self.client, self.run_id, self.say, self.after_s = client, run_id, say, after_s
        self.at = time.monotonic() + after_s
        self.told: set[str] = set()

    def due_in(self) -> float:
        """Seconds until the next look (0: now)."""
        return max(0.0, self.at - time.monotonic())

    def check(self) -> None:
        """Look when it is due; raises what :meth:`Client.explain` raises."""
        if time.monotonic() < self.at:
            return
        self.at = time.monotonic() + self.after_s
        for node, why in self.client.explain(self.run_id).items():
            if why.reason == WaitReason.NO_WORKER and node not in self.told:
                self.told.add(node)
                self.say(f"waiting: {node}: {why.text}; still waiting")


def follow_run(
    client: Client,
    run_id: str,
    *,
    console: Console | None = None,
    quiet: bool = False,
    interval: float = 0.25,
    timeout: float | None = None,
    outage: Outage | None = None,
    tell_unserved: bool = False,
) -> Run:
    """Block until run ``run_id`` is terminal and return its final status, showing
    progress on ``console`` (default: stderr) unless ``quiet``: a live bar when the
    console is a terminal, plain lines otherwise. ``KeyboardInterrupt`` propagates (the
    display is closed first). The database going away (a restart, a short outage) is
    ridden out as one spell (``outage``, or one of its own: every look of the follow
    counts against the same ``OUTAGE_GRACE_S``, up to ``timeout``). Raises
    RunNotFoundError for an unknown run, WaitTimeoutError when ``timeout`` seconds (None:
    no limit) pass first, and the last database error when the database stayed out of
    reach until the timeout (or for ``OUTAGE_GRACE_S`` without one).

    While it shows progress, the log records of this process go through the display (on
    a terminal: printed on ``console`` above the bar, which stays whole), except those
    that tell what the display tells itself: a failed attempt and the end of this run
    (:func:`reported_by_display`), so each failure is told once. With
    ``tell_unserved``, steps that no live worker serves are told on ``console`` after a
    few seconds, quiet or not (:class:`UnservedNotice`), and the wait goes on."""
    console = console if console is not None else Console(stderr=True, highlight=False)
    notice = None
    if tell_unserved:
        notice = UnservedNotice(
            client, run_id, lambda line: console.print(Text(line), soft_wrap=True)
        )
    waiter = Waiter(client, run_id, interval, timeout, outage, notice)
    if quiet:
        return waiter.until_terminal()
    drop = functools.partial(reported_by_display, run_id)
    if console.is_terminal:
        with logs_above(console, drop):
            return _follow_bar(client, run_id, console, waiter)
    with logs_above(None, drop):
        return follow_plain(client, run_id, console, waiter)


def end_line(run: Run) -> str:
    """The last line of a followed run, after its progress: ``run ID completed``, or
    ``run ID failed: ERROR`` (``cancelled: REASON``). A run failed by a discarded step says
    only which step (``run ID failed: step b discarded``): the progress told its error
    just before, once."""
    if run.state == "completed" or not run.error:
        return f"run {run.id} {run.state}"
    error = run.error
    if run.error_kind == "step_discarded":
        error = error.split(": ", 1)[0]  # "step NODE discarded: ERROR" (engine/advance.py)
    return f"run {run.id} {run.state}: {error}"


def reported_by_display(run_id: str, record: logging.LogRecord) -> bool:
    """Whether ``record`` tells what the progress display of run ``run_id`` shows itself:
    a worker's line about a failed attempt of one of its steps, or about its end (the
    records whose ``step_event`` field is set, :data:`cyclone_flow.logs.EVENT_FIELD`)."""
    return (
        getattr(record, EVENT_FIELD, None) is not None and getattr(record, "run_id", None) == run_id
    )


class ConsoleLogHandler(logging.Handler):
    """Prints each log record (formatted as the handler it stands in for formats it) on a
    rich console: above the console's live display while one is drawn, so the display
    stays whole. Thread-safe (the console's lock); the text is never read as markup."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.console.print(Text(self.format(record)), soft_wrap=True, highlight=False)
        except Exception:
            self.handleError(record)


@contextmanager
def logs_above(
    console: Console | None, drop: Callable[[logging.LogRecord], bool] | None = None
) -> Iterator[None]:
    """While in the block, the root logger's stream handlers (what
    :func:`~cyclone_flow.cli.common.setup_logging` installed) print on ``console`` through
    a :class:`ConsoleLogHandler` with the same format and level (None: they stay as they
    are), and leave out the records for which ``drop(record)`` is true; they are put back
    afterwards."""
    root = logging.getLogger()
    streams = [h for h in root.handlers if type(h) is logging.StreamHandler]
    standins: list[logging.Handler] = []

    def keep(record: logging.LogRecord) -> bool:
        return drop is None or not drop(record)

    for handler in streams:
        standin: logging.Handler = handler
        if console is not None:
            standin = ConsoleLogHandler(console)
            standin.setFormatter(handler.formatter)
            standin.setLevel(handler.level)
            root.removeHandler(handler)
            root.addHandler(standin)
        standin.addFilter(keep)
        standins.append(standin)
    try:
        yield
    finally:
        for handler, standin in zip(streams, standins, strict=True):
            standin.removeFilter(keep)
            if standin is not handler:
                root.removeHandler(standin)
                root.addHandler(handler)


class Waiter:
    """Waits a little at a time for run ``run_id``: :meth:`next` returns its status once
    it is terminal or ``interval`` seconds passed, and raises WaitTimeoutError past
    ``timeout`` seconds (None: no limit); :meth:`ride` rides a read out through database
    outages through ``outage`` (one spell for all its reads; None: one of its own), up to
    that deadline. With ``notice``, each look also checks it (:class:`UnservedNotice`)."""

    def __init__(
        self,
        client: Client,
        run_id: str,
        interval: float,
        timeout: float | None,
        outage: Outage | None = None,
        notice: UnservedNotice | None = None,
    ) -> None:
        self.client, self.run_id, self.interval, self.timeout = client, run_id, interval, timeout
        self.notice = notice
        self.deadline = None if timeout is None else time.monotonic() + timeout
        outage = outage if outage is not None else Outage()
        self.outage = outage
        if self.deadline is not None:
            given = outage.deadline
            outage.deadline = self.deadline if given is None else min(given, self.deadline)

    def next(self) -> Run:
        run = self.ride(self._next)
        if self.notice is not None and not run.state.terminal:
            self.ride(self.notice.check)
        return run

    def until_terminal(self) -> Run:
        """The run's status once it is terminal: :meth:`Client.wait` (woken by the run's
        notification, polling at the client's ``poll_interval``; interrupted only for
        the notice's looks), no display."""

        def wait() -> Run | None:
            left = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
            look = None if self.notice is None else self.notice.due_in()
            for_look = look is not None and (left is None or look < left)
            try:
                return self.client.wait(self.run_id, timeout=look if for_look else left)
            except WaitTimeoutError as exc:
                if for_look:
                    return None  # time to look for unserved steps
                assert self.timeout is not None
                raise WaitTimeoutError(self.run_id, self.timeout, exc.state) from None

        while True:
            run = self.ride(wait)
            if run is not None:
                return run
            assert self.notice is not None
            self.ride(self.notice.check)

    def ride(self, call: Callable[[], T]) -> T:
        """``call()``, through database outages (:meth:`Outage.ride`)."""
        return self.outage.ride(call)

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


def follow_plain(client: Client, run_id: str, console: Console, waiter: Waiter) -> Run:
    """Print :class:`PlainLines` of the run's steps on ``console`` at each look of
    ``waiter`` until the run is terminal; return its final status. Each look is one
    :meth:`Client.run_view` (the run and its steps of one moment), with the fan-out item
    steps: the lines sum up a fan-out node's items from them (``status --watch --items``
    prints the same lines: plain lines have no line per item)."""
    lines = PlainLines()
    while True:
        waiter.next()
        view = waiter.ride(lambda: client.run_view(run_id, items=True))
        for line in lines.changes(view.steps):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        if view.run.state.terminal:
            return view.run


def _follow_bar(client: Client, run_id: str, console: Console, waiter: Waiter) -> Run:
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("steps  {task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    failures = PlainLines(failures_only=True)  # told once, above the bar
    # no redirect of sys.stdout/stderr: a handler's prints go to its step logs (the
    # worker's proxies, cyclone_flow.worker.step_logs), not above the bar
    with Progress(
        *columns, console=console, transient=False, redirect_stdout=False, redirect_stderr=False
    ) as progress:
        task = progress.add_task(f"run {short_id(run_id)}", total=None, detail="")
        while True:
            waiter.next()
            view = waiter.ride(lambda: client.run_view(run_id, items=True))  # one moment
            status, steps = view.run, view.steps
            for line in failures.changes(steps):
                progress.console.print(Text(line), soft_wrap=True, highlight=False)
            counts = StepCounts.of(steps)
            detail = f"{counts.running} running"
            if counts.failed:
                detail += f", {counts.failed} failed attempt(s)"
            if status.state.terminal:
                detail = f"{status.state}{counts.not_completed()}"
            progress.update(task, total=counts.total, completed=counts.done, detail=detail)
            if status.state.terminal:
                return status


@contextmanager
def count_progress(
    console: Console, label: str, total_bytes: int | None, unit: str = "runs"
) -> Iterator[Callable[[int, int], None]]:
    """A progress display of a bulk submission for the block, on ``console`` when it is a
    terminal (nothing otherwise: the command prints its count at the end). Yields
    ``update(runs, bytes_read)``: the runs written so far and how far into the input it
    read; with ``total_bytes`` (a regular file's size) the bar shows the share read, else
    only the count, as ``N unit`` (``runs``; ``jobs`` for ``enqueue``)."""
    if not console.is_terminal:
        yield lambda runs, done: None
        return
    columns: list[Any] = [TextColumn("[bold]{task.description}")]
    if total_bytes:
        columns.append(BarColumn())
    columns += [TextColumn(f"{{task.fields[runs]:,}} {unit}"), TimeElapsedColumn()]
    with Progress(
        *columns, console=console, transient=True, redirect_stdout=False, redirect_stderr=False
    ) as progress:
        task = progress.add_task(label, total=total_bytes or None, runs=0)

        def update(runs: int, done: int) -> None:
            progress.update(task, completed=done, runs=runs)

        yield update


def wait_for_end(
    client: Client,
    run_id: str,
    *,
    as_json: bool,
    timeout: float | None,
    quiet: bool | None = None,
) -> Run:
    """The wait of ``submit --wait``, ``rerun --wait`` and ``enqueue --wait``: follow run
    ``run_id`` (progress on stderr unless ``quiet``, default ``as_json``; steps no live
    worker serves told after a few seconds either way) and return it once it ended.
    Exits instead, the run going on: 1 when ``timeout`` seconds passed (with ``as_json``,
    ``{"run_id", "state", "timed_out": true}`` on stdout) or the database stayed away, 130
    on Ctrl-C (one line, no traceback)."""
    try:
        quiet = as_json if quiet is None else quiet
        return follow_run(client, run_id, quiet=quiet, timeout=timeout, tell_unserved=True)
    except WaitTimeoutError as exc:
        if as_json:
            echo_json({"run_id": run_id, "state": exc.state, "timed_out": True})
        click.echo(f"error: {exc}; it goes on (see `cyclone-flow status {run_id}`)", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: run {run_id} goes on", err=True)
        sys.exit(130)
    except Exception as exc:
        if not database_lost(exc):
            raise
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        click.echo(
            f"error: cannot use the database: {first}; run {run_id} goes on "
            f"(see `cyclone-flow status {run_id}`)",
            err=True,
        )
        sys.exit(1)


def print_ended(
    status: Run,
    as_json: bool,
    steps: Sequence[Step] | None = None,
    progress: Mapping[str, Mapping[str, int]] | None = None,
    **extra: Any,
) -> NoReturn:
    """The end of ``submit --wait`` / ``rerun --wait``: the run as ``--json`` (``run_dict``
    of the run, its ``steps`` and fan-out ``progress``, with ``extra``), or its end line on
    stderr and, when it completed, its output; exit 0 when it completed, 1 when not."""
    if as_json:
        echo_json({**run_dict(status, steps, progress), **extra})
    else:
        click.echo(end_line(status), err=True)
        if status.state == "completed":
            echo_json(status.output)  # after the run id: the result, as `run` prints it
    sys.exit(0 if status.state == "completed" else 1)

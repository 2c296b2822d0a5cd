"""Commands that show runs and workers: ``status`` (one run and its steps), ``runs`` (the
most recent runs), ``logs`` (what a run's handlers logged and printed), ``output`` (one
node's or the run's output) and ``workers`` (the started clients and whether they are
alive)."""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any, NoReturn

import click
from rich.text import Text

from cyclone_flow.cli.common import (
    REVISION,
    compact_table,
    database_options,
    duration_option,
    echo_json,
    handle_errors,
    notify_option,
    out_console,
    out_table,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.cli.show import name_width, run_dict, wrap_name
from cyclone_flow.cli.watch import watch_run
from cyclone_flow.client import Client
from cyclone_flow.db.rows import StepLogLine, WorkerRow
from cyclone_flow.describe import (
    describe_attempt,
    queue_info_lines,
    state_word,
    step_detail,
    step_error,
    step_took,
    wait_line,
)
from cyclone_flow.errors import NodeNotFoundError, shown

STATUS_LOG_LINES = 5
"""Log lines ``status`` shows (the last ones of the run)."""
FOLLOW_POLL_S = 0.5
"""Seconds between two reads of ``logs --follow`` (which stops 1 s after the run ended)."""
WATCH_INTERVAL_S = 0.5
"""Seconds between two reads of ``status --watch`` (``--interval``)."""
WATCH_MAX_INTERVAL_S = 3600.0
"""The longest ``status --watch --interval``."""


def log_line_text(line: StepLogLine) -> str:
    """One log line as ``logs`` prints it: time, node#attempt, stream (and level), text."""
    stream = f"{line.stream} {line.level}" if line.level else line.stream
    at = line.at.isoformat(timespec="milliseconds")
    return f"{at} {line.node}#{line.attempt} {stream}: {line.message}"


def log_line_dict(line: StepLogLine) -> dict[str, object]:
    """The ``--json`` form of a log line (ISO 8601 ``at``)."""
    return {
        "id": line.id,
        "node": line.node,
        "attempt": line.attempt,
        "seq": line.seq,
        "at": line.at.isoformat(),
        "stream": line.stream,
        "level": line.level,
        "message": line.message,
    }


@click.command("status")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True)
@click.option("--items", is_flag=True, help="Also list every fan-out item step.")
@click.option(
    "--watch",
    is_flag=True,
    help="Follow the run until it ends: a live tree of its nodes on a terminal, a line per "
    "change otherwise; exit 0 when it completed, 1 when not.",
)
@click.option(
    "--interval",
    default=None,
    help="With --watch: how often to read the run (default 500ms), e.g. 1s.",
)
@notify_option
@database_options
@handle_errors
def status_cmd(
    run_id: str,
    as_json: bool,
    items: bool,
    watch: bool,
    interval: str | None,
    notify: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """Show a run's state and each step's state, attempt, reclaims and error; fan-out
    nodes with their item progress, child nodes with their child run, wait_signal nodes
    with the awaited signal. With --watch, follow it until it ends (Ctrl-C: exit 130)."""
    if watch and as_json:
        raise click.UsageError("--watch does not go with --json")
    if interval is not None and not watch:
        raise click.UsageError("--interval goes with --watch")
    every = WATCH_INTERVAL_S
    if interval is not None:
        every = duration_option(interval, "--interval", max_s=WATCH_MAX_INTERVAL_S)
    setup_logging()
    url = resolve_database(database_url, existing=True)
    if watch:
        _watch(url, schema, run_id, items=items, interval=every, notify=notify)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        # one snapshot: the steps, their reasons and the queue facts of one moment
        view = client.run_view(client.resolve_run_id(run_id), items=items, logs=STATUS_LOG_LINES)
    run, steps, progress, waiting, tail = (
        view.run,
        list(view.steps),
        view.progress,
        view.waiting,
        view.log_tail,
    )
    if as_json:
        echo_json(
            {
                **run_dict(run, steps, progress, waiting),
                "queue_features": view.queue.as_dict(),
                "log_tail": [log_line_dict(line) for line in tail],
            }
        )
        return
    console = out_console()
    revision = f"revision {run.revision}  " if run.revision is not None else ""
    console.print(
        Text.assemble(
            f"run {run.id}  flow {run.flow_name}  {revision}", (state_word(run.state), "bold")
        )
    )
    for line in queue_info_lines(view.queue):
        console.print(Text(line))
    if run.parent_run_id:
        console.print(Text(f"child run of run {run.parent_run_id} (node {run.parent_node})"))
    if run.rerun_of:
        reused = sum(s.reused_from is not None for s in steps)
        console.print(Text(f"rerun of run {run.rerun_of} ({reused} steps reused)"))
    if run.deadline_at and run.state == "running":
        console.print(Text(f"deadline: {run.deadline_at.isoformat(timespec='seconds')}"))
    if run.error:
        console.print(Text(f"error: {run.error}"))
    headers = ("node", "state", "attempt", "reclaims", "queue", "took", "detail", "error")
    # on a narrow terminal a long node name wraps after its _ or - (rich would fold it
    # anywhere); a pipe has no width: the names stay whole
    width = name_width([s.node for s in steps], console.width) if console.is_terminal else 0
    rows = []
    for s in steps:
        # a completed step may keep the error of an earlier attempt: --json shows them all
        rows.append(  # Text cells: error messages are never read as rich markup
            (
                Text(wrap_name(s.node, width) if width else s.node),
                Text(state_word(s.state)),
                describe_attempt(s.attempt, s.max_attempts, s.lease_generation),
                str(s.reclaims),
                Text(s.queue),
                step_took(s, view.now),
                Text(step_detail(s, progress, run.rerun_of)),
                Text(step_error(s)),
            )
        )
    table = compact_table(headers, rows)  # no took, detail or error column none uses
    if width:
        table.columns[0].min_width = width
        table.columns[0].no_wrap = True
        table.columns[1].min_width = max((len(str(s.state)) for s in steps), default=0)
    console.print(table)
    for node, why in waiting.items():
        console.print(Text(wait_line(node, why)))
    if run.state == "completed" and run.output is not None:
        console.print(Text("output:"))
        console.print(Text(json.dumps(run.output, indent=2, ensure_ascii=False)))
    # the last attempt of a discarded step: its traceback in full, the rest first lines only
    failed = {(s.node, s.attempt) for s in steps if s.state == "discarded"}
    if tail:
        console.print(Text(f"last log lines (all: cyclone-flow logs {run.id}):"))
        for entry in tail:
            head, *rest = log_line_text(entry).splitlines() or [""]
            if rest and (entry.node, entry.attempt) in failed:  # indented under its line
                console.print(Text("\n".join([head, *("    " + line for line in rest)])))
                continue
            more = f" (+{len(rest)} lines)" if rest else ""
            console.print(Text(f"{head}{more}"))


def _watch(
    url: str, schema: str, run_id: str, *, items: bool, interval: float, notify: bool
) -> NoReturn:
    """``status --watch``: follow the run on stdout, then exit 0 when it completed, 1
    when it failed or was cancelled, 130 on Ctrl-C (quietly: the display is closed)."""
    try:
        with Client(url, schema=schema, prepare=prepare_enabled(), notify=notify) as client:
            full = client.resolve_run_id(run_id)
            run = watch_run(client, full, out_console(), interval=interval, items=items)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(0 if run.state == "completed" else 1)


@click.command("runs")
@click.option("--flow", default=None, help="Only runs of this flow.")
@click.option(
    "--revision",
    type=REVISION,
    default=None,
    help="With --flow: only runs submitted with this deployed revision of it.",
)
@click.option("--state", type=click.Choice(["running", "completed", "failed", "cancelled"]))
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@database_options
@handle_errors
def runs_cmd(
    flow: str | None,
    revision: int | None,
    state: str | None,
    limit: int,
    as_json: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """List the most recent runs, newest first (a run of a deployed flow's revision:
    FLOW@REVISION)."""
    if revision is not None and flow is None:
        raise click.UsageError("--revision goes with --flow (a revision is one flow's)")
    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        runs = client.list_runs(flow=flow, state=state, limit=limit, revision=revision)
    if as_json:
        echo_json([run_dict(r) for r in runs])
        return
    if not runs:
        click.echo("no runs")
        return
    table = out_table("flow", "state", "created", "finished")
    table.add_column("run", no_wrap=True, min_width=36)  # never cut: people copy it
    for r in runs:
        table.add_row(
            Text(r.flow_name if r.revision is None else f"{r.flow_name}@{r.revision}"),
            str(r.state),
            r.created_at.isoformat(timespec="seconds"),
            r.finished_at.isoformat(timespec="seconds") if r.finished_at else "",
            r.id,
        )
    out_console().print(table)


def worker_dict(w: WorkerRow) -> dict[str, object]:
    """The ``--json`` form of a worker row (ISO 8601 timestamps)."""
    return {
        "client_id": w.client_id,
        "hostname": w.hostname,
        "pid": w.pid,
        "queues": dict(zip(w.queues, w.slots, strict=True)),
        "only_run": w.only_run,
        "live": w.live,
        "lease_ttl_s": w.lease_ttl_s,
        "last_seen_s": round(w.last_seen_s, 3),
        "started_at": w.started_at.isoformat(),
        "heartbeat_at": w.heartbeat_at.isoformat(),
        "version": w.version,
    }


@click.command("workers")
@click.option("--json", "as_json", is_flag=True)
@database_options
@handle_errors
def workers_cmd(as_json: bool, database_url: str | None, schema: str) -> None:
    """List the started clients (workers, and `run` processes) from their heartbeat
    rows: live ones first, then the dead ones not yet reaped."""
    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        rows = client.workers()
    if as_json:
        echo_json([worker_dict(w) for w in rows])
        return
    console = out_console()
    if not rows:
        console.print("no workers")
        return
    table = out_table("state", "queues", "host", "pid", "last beat", "started", "version")
    table.add_column("client", no_wrap=True)  # never cut: people copy it
    for w in rows:
        queues = ", ".join(f"{q}:{n}" for q, n in zip(w.queues, w.slots, strict=True))
        if w.only_run is not None:
            queues += f" (run {w.only_run} only)"
        table.add_row(
            Text("live" if w.live else "dead", style="green" if w.live else "red"),
            Text(queues),
            Text(w.hostname),
            str(w.pid),
            f"{w.last_seen_s:.0f}s ago",
            w.started_at.isoformat(timespec="seconds"),
            Text(w.version),
            Text(w.client_id),
        )
    console.print(table)


@click.command("logs")
@click.argument("run_id")
@click.option("--node", default=None, help="Only this node (a fan-out node: its items too).")
@click.option("--attempt", type=click.IntRange(min=1), default=None, help="Only this attempt.")
@click.option("--follow", is_flag=True, help="Keep printing new lines until the run ends.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@database_options
@handle_errors
def logs_cmd(
    run_id: str,
    node: str | None,
    attempt: int | None,
    follow: bool,
    as_json: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """Print what a run's handlers logged and printed (ctx.log, logging records, stdout
    and stderr), per attempt, in write order."""
    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        run = client.get_run(client.resolve_run_id(run_id))
        if node is not None:
            check_node(client, run.id, node)
        reader = _LogReader(client, run.id, node, attempt)
        printed = 0
        ended_at: float | None = None
        while True:
            if follow and ended_at is None and client.get_run(run.id).state != "running":
                ended_at = time.monotonic()
            for line in reader.new_lines():
                printed += 1
                if as_json:
                    click.echo(json.dumps(log_line_dict(line), ensure_ascii=False))
                else:
                    click.echo(log_line_text(line))
            # the last attempt's lines are written right after its result: keep reading
            # for a moment after the run ended
            if not follow or (ended_at is not None and time.monotonic() - ended_at > 1.0):
                break
            time.sleep(FOLLOW_POLL_S)
        if not printed:
            which = [f"node {node}"] if node else []
            which += [f"attempt {attempt}"] if attempt else []
            of = f" of {', '.join(which)}" if which else ""
            click.echo(f"run {run.id} has no log lines{of}", err=True)


def check_node(client: Client, run_id: str, node: str) -> None:
    """Raise NodeNotFoundError (exit 2) unless run ``run_id`` has top-level node ``node``
    or, for ``NODE[i]``, fan-out node ``NODE`` may have item ``i`` (its items not made
    yet, or ``i`` below their count); the messages of :meth:`Client.get_step_output`."""
    base, item = split_item(node)
    top = {s.node: s for s in client.list_steps(run_id, items=False)}
    step = top.get(base)
    if step is None:
        known = ", ".join(top)
        raise NodeNotFoundError(
            run_id, base, f"run {run_id} has no node {shown(base)} (its nodes: {known})"
        )
    if item is None:
        return
    if step.type != "fan_out":
        raise NodeNotFoundError(
            run_id, base, f"node {shown(base)} is no fan-out node ({step.type}): it has no items"
        )
    total = step.items_total
    if total is not None and item >= total:
        raise NodeNotFoundError(
            run_id,
            base,
            f"node {shown(base)} has no item {item} (items 0 to {total - 1})"
            if total
            else f"node {shown(base)} has no item {item} (it has no items)",
            item,
        )


FOLLOW_LAG_S = 5.0
"""Seconds ``logs --follow`` looks back below the last id it printed: two worker
processes' flushes can commit out of id order, and a line committed late must not be
skipped."""


class _LogReader:
    """The lines of one run not printed yet, in id order per read. Reads from the highest
    id printed more than :data:`FOLLOW_LAG_S` ago (not the highest printed) and skips the
    ids it printed since, so a row whose id was taken before a printed one but committed
    after it is still printed."""

    def __init__(self, client: Client, run_id: str, node: str | None, attempt: int | None):
        self.client = client
        self.run_id = run_id
        self.node = node
        self.attempt = attempt
        self.floor = 0
        self.seen: set[int] = set()
        self.marks: list[tuple[float, int]] = []  # (when, highest id printed by then)

    def new_lines(self) -> list[StepLogLine]:
        """The lines with an id above the floor not returned before."""
        out: list[StepLogLine] = []
        after = self.floor
        while True:
            page = self.client.list_step_logs(
                self.run_id, node=self.node, attempt=self.attempt, after=after
            )
            out.extend(line for line in page if line.id not in self.seen)
            if len(page) < 10_000:  # the page size of Client.step_logs
                break
            after = page[-1].id
        self.seen.update(line.id for line in out)
        now = time.monotonic()
        self.marks.append((now, max(self.seen, default=self.floor)))
        while self.marks and now - self.marks[0][0] > FOLLOW_LAG_S:
            self.floor = max(self.floor, self.marks.pop(0)[1])
        self.seen = {i for i in self.seen if i > self.floor}
        return out


EXIT_NO_OUTPUT = 1
"""``output``'s exit code when the node (or run) has no output yet."""
EXIT_UNKNOWN = 2
"""``output``'s exit code for an unknown node or item of a run it found (an unknown run
exits 1, as for every command: docs/cli.md)."""

ITEM_NODE = re.compile(r"(?P<node>[^\[\]]+)\[(?P<item>[0-9]+)\]")
"""``NODE[i]``: item ``i`` of fan-out node ``NODE``, as errors and ``logs --node`` name it
(node names have no brackets)."""


def split_item(node: str) -> tuple[str, int | None]:
    """``("each", 1)`` for ``each[1]``, ``(node, None)`` for any other name."""
    match = ITEM_NODE.fullmatch(node)
    if match is None:
        return node, None
    return match["node"], int(match["item"])


@click.command("output")
@click.argument("run_id")
@click.argument("node", required=False)
@click.option(
    "--item",
    type=click.IntRange(min=0),
    default=None,
    help="With NODE, a fan-out node: the output of its item N (0-based).",
)
@database_options
@handle_errors
def output_cmd(
    run_id: str, node: str | None, item: int | None, database_url: str | None, schema: str
) -> None:
    """Print the output of NODE of run RUN_ID as JSON on stdout (whole, uncut); a fan-out
    node: the list of its item outputs, with --item N (or NODE[N]) the output of item N;
    without NODE: the run's output. Exit 1 when it has none yet (its state on stderr) and
    for an unknown run, 2 for an unknown node or item."""
    if item is not None and node is None:
        raise click.UsageError("--item goes with NODE (a fan-out node)")
    if node is not None:
        base, index = split_item(node)
        if index is not None:
            if item is not None and item != index:
                raise click.UsageError(f"{node} and --item {item} name different items")
            node, item = base, index
    setup_logging()
    url = resolve_database(database_url, existing=True)
    value: Any
    # an unknown (or too short, or ambiguous) run id: exit 1 by handle_errors, as for
    # every command; an unknown node or item: NodeNotFoundError's EXIT_UNKNOWN
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        full = client.resolve_run_id(run_id)
        if node is None:
            run = client.get_run(full)
            if run.state != "completed":
                click.echo(f"error: run {run.id} has no output: it is {run.state}", err=True)
                sys.exit(EXIT_NO_OUTPUT)
            value = run.output
        else:
            found = client.get_step_output(full, node, item)
            if not found.has_output:
                click.echo(
                    f"error: node {found.node} of run {full} has no output: it is {found.state}",
                    err=True,
                )
                sys.exit(EXIT_NO_OUTPUT)
            value = found.output
    echo_json(value)

"""Database commands: ``migrate``, ``submit``, ``worker``, ``run``, ``status``, ``runs``."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from dataclasses import asdict
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cyclone_flow.cli.common import (
    add_import_paths,
    database_options,
    duration_option,
    echo_json,
    handle_errors,
    input_options,
    read_input,
    resolve_database,
    setup_logging,
)
from cyclone_flow.cli.node_cmds import step_detail, step_fields
from cyclone_flow.cli.progress import follow_run
from cyclone_flow.cli.queue_cmds import queue_info_lines, queue_options, submission_kwargs
from cyclone_flow.cli.retention_cmds import parse_age
from cyclone_flow.client import Client, migrate
from cyclone_flow.config import MAX_LEASE_TTL_S, RetentionConfig
from cyclone_flow.db.rows import Run, Step
from cyclone_flow.durations import MAX_FLOW_DURATION_S
from cyclone_flow.errors import ConfigError, WaitTimeoutError
from cyclone_flow.flowfile import load_flow
from cyclone_flow.names import DEFAULT_QUEUE, validate_queue_name
from cyclone_flow.worker.imports import AllowList


def _duration(value: str, option: str) -> float:
    return duration_option(value, option, max_s=MAX_LEASE_TTL_S)


@click.command("migrate")
@database_options
@handle_errors
def migrate_cmd(database_url: str | None, schema: str) -> None:
    """Apply the missing schema migrations (safe to run from many processes at once)."""
    setup_logging()
    url = resolve_database(database_url)
    applied = migrate(url, schema=schema)
    if applied:
        click.echo(f"applied migrations {', '.join(map(str, applied))} to schema {schema}")
    else:
        click.echo(f"schema {schema} is up to date")


@click.command("submit")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@input_options
@queue_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"run_id": ..., "duplicate": ...} (with --wait: the run).',
)
@click.option(
    "--wait",
    "wait",
    is_flag=True,
    help="Wait until the run ends (workers elsewhere run it); exit 0 when it completed, "
    "1 when it failed or was cancelled.",
)
@click.option(
    "--timeout",
    default=None,
    help="With --wait: give up after this long, e.g. 30s or 5m (exit 1; the run goes on).",
)
@database_options
@handle_errors
def submit_cmd(
    file: str,
    input_json: str | None,
    input_file: str | None,
    as_json: bool,
    wait: bool,
    timeout: str | None,
    database_url: str | None,
    schema: str,
    **queue_values: Any,
) -> None:
    """Lint FILE, then write a run of it (definition, run, steps, deps) in one transaction;
    print its id. Queue options: docs/queues.md. With --wait, then wait for the run to end
    (Client.wait: woken by cyclone_run_done, polling as the floor)."""
    if timeout is not None and not wait:
        raise click.UsageError("--timeout goes with --wait")
    wait_s = None
    if timeout is not None:
        wait_s = duration_option(timeout, "--timeout", max_s=MAX_FLOW_DURATION_S, allow_zero=True)
    setup_logging()
    run_input = read_input(input_json, input_file)
    options = submission_kwargs(queue_values)
    flow = load_flow(file)
    url = resolve_database(database_url)
    client = Client(url, schema=schema)
    try:
        run_id = client.submit(flow, run_input, **options)
        if not wait:
            if as_json:
                echo_json({"run_id": str(run_id), "duplicate": run_id.duplicate})
            else:
                click.echo(run_id)
                if run_id.duplicate:
                    click.echo("duplicate: an existing run holds this unique key", err=True)
            return
        if not as_json:
            click.echo(run_id)
            click.echo(f"waiting for run {run_id} of flow {flow.name} ...", err=True)
        try:
            status = follow_run(client, run_id, quiet=as_json, timeout=wait_s)
        except WaitTimeoutError as exc:
            if as_json:
                echo_json({"run_id": run_id, "state": exc.state, "timed_out": True})
            click.echo(f"error: {exc}; it goes on (see `cyclone-flow status {run_id}`)", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo(f"\ninterrupted: run {run_id} goes on", err=True)
            sys.exit(130)
    finally:
        client.shutdown()
    if as_json:
        echo_json(_run_dict(status))
    elif status.state == "completed":
        click.echo(f"run {run_id} completed", err=True)
    else:
        click.echo(f"run {run_id} {status.state}: {status.error}", err=True)
    sys.exit(0 if status.state == "completed" else 1)


def _parse_queues(specs: tuple[str, ...], workers: int) -> dict[str, int]:
    """``--queue NAME[=N]`` options as ``worker_queues``; none: ``{"default": workers}``."""
    if not specs:
        return {DEFAULT_QUEUE: workers}
    out: dict[str, int] = {}
    for spec in specs:
        name, sep, count = spec.partition("=")
        try:
            validate_queue_name(name)
            n = int(count) if sep else workers
        except (ConfigError, ValueError) as exc:
            raise click.BadParameter(f"{spec!r}: {exc}", param_hint="--queue") from None
        if n < 1:
            raise click.BadParameter(
                f"{spec!r}: the worker count must be >= 1", param_hint="--queue"
            )
        out[name] = n
    return out


def _allow_list(allow_module: tuple[str, ...]) -> AllowList:
    prefixes = [p for item in allow_module for p in item.split(",") if p.strip()]
    return AllowList(prefixes=prefixes)


@click.command("worker")
@click.option("--workers", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--lease-ttl", default="30s", show_default=True, help="Lease TTL, e.g. 30s.")
@click.option(
    "--max-reclaims",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Reclaims after which an expired lease discards the step (0: unbounded).",
)
@click.option(
    "--allow-module",
    multiple=True,
    envvar="CYCLONE_ALLOW_MODULES",
    help="Module prefix handlers may be imported from (repeatable; env "
    "CYCLONE_ALLOW_MODULES, comma-separated).",
)
@click.option(
    "--import-path",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Folder to put on sys.path (repeatable).",
)
@click.option(
    "--queue",
    "queues",
    multiple=True,
    metavar="NAME[=N]",
    help="Serve queue NAME with N workers (repeatable; N defaults to --workers). Without "
    "it the worker serves the default queue with --workers workers.",
)
@click.option(
    "--shutdown-timeout",
    default="10s",
    show_default=True,
    help="On SIGTERM/SIGINT, how long running handlers may finish before their leases "
    "are released for other workers.",
)
@click.option(
    "--exit-when-idle",
    is_flag=True,
    help="Exit once no step of the served queues is available or running.",
)
@click.option(
    "--tx-slots",
    type=click.IntRange(min=1),
    default=None,
    help="Cap on completion transactions open at once (default: the total worker count); "
    "the pool is tx_slots + 6 connections.",
)
@click.option("--client-id", default=None, help="Lease owner name (default: host/pid/random).")
@click.option(
    "--poll-interval",
    default="100ms,1s",
    show_default=True,
    metavar="MIN,MAX",
    help="Claim polling floor: poll at MIN, back off to MAX while idle.",
)
@click.option(
    "--notify/--no-notify",
    default=True,
    show_default=True,
    help="LISTEN for wakeups; --no-notify polls only (PgBouncer in transaction mode).",
)
@click.option(
    "--retention",
    default=None,
    metavar="DURATION",
    help="Also purge completed, failed and cancelled runs older than this (e.g. 30d).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics on http://ADDR:PORT/metrics (0: any free port).",
)
@click.option(
    "--metrics-addr",
    default="0.0.0.0",
    show_default=True,
    help="Address the metrics endpoint listens on.",
)
@database_options
@handle_errors
def worker_cmd(
    workers: int,
    lease_ttl: str,
    max_reclaims: int,
    allow_module: tuple[str, ...],
    import_path: tuple[str, ...],
    queues: tuple[str, ...],
    shutdown_timeout: str,
    exit_when_idle: bool,
    tx_slots: int | None,
    client_id: str | None,
    poll_interval: str,
    notify: bool,
    retention: str | None,
    metrics_port: int | None,
    metrics_addr: str,
    database_url: str | None,
    schema: str,
) -> None:
    """Claim and execute steps until SIGTERM/SIGINT (graceful: exits 0)."""
    setup_logging(logging.INFO)
    ttl = _duration(lease_ttl, "--lease-ttl")
    grace = _duration(shutdown_timeout, "--shutdown-timeout")
    allow = _allow_list(allow_module)
    if not allow.prefixes:
        raise click.UsageError(
            "give at least one --allow-module PREFIX (or CYCLONE_ALLOW_MODULES): a worker "
            "imports handlers only from the modules it is allowed"
        )
    worker_queues = _parse_queues(queues, workers)
    add_import_paths(import_path)
    url = resolve_database(database_url)
    options: dict[str, Any] = {
        "poll_interval": _poll_interval(poll_interval),
        "notify": notify,
    }
    if tx_slots is not None:
        options["tx_slots"] = tx_slots
    if client_id is not None:
        options["client_id"] = client_id
    if retention is not None:
        options["retention"] = RetentionConfig(default_age=parse_age(retention, "--retention"))
    metrics = _start_metrics(metrics_port, metrics_addr)
    client = Client(
        url,
        schema=schema,
        worker_queues=worker_queues,
        lease_ttl=ttl,
        max_reclaims=max_reclaims,
        allow_modules=allow,
        **options,
    )
    if metrics is not None:
        metrics[0].watch_queues(client.db, worker_queues, client.config.logger)
        client.observe_steps(metrics[0].observe)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        logging.getLogger("cyclone_flow").info("%s: shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    client.start()
    logging.getLogger("cyclone_flow").info(
        "worker %s started: queues %s, allowed modules %s",
        client.config.client_id,
        ", ".join(f"{q}={n}" for q, n in client.config.worker_queues.items()),
        allow.describe(),
    )
    served = list(client.config.worker_queues)
    idle_check = max(client.config.poll_interval[1], 0.2)
    try:
        while not stop.wait(idle_check):
            if (
                exit_when_idle
                and client.worker is not None
                and client.worker.in_flight() == 0
                and client.count_active(served) == 0
            ):
                break
    finally:
        client.shutdown(timeout=grace)
        if metrics is not None:
            metrics[1].close()
    sys.exit(0)


def _poll_interval(value: str) -> tuple[float, float]:
    """``MIN,MAX`` (or one duration for both) as seconds."""
    parts = [p.strip() for p in value.split(",")]
    if len(parts) not in (1, 2):
        raise click.BadParameter("use MIN,MAX, e.g. 100ms,1s", param_hint="--poll-interval")
    lo = _duration(parts[0], "--poll-interval")
    hi = _duration(parts[-1], "--poll-interval")
    return lo, hi


def _start_metrics(port: int | None, addr: str) -> tuple[Any, Any] | None:
    """``(Metrics, MetricsServer)`` serving on ``addr:port``, or None without a port."""
    if port is None:
        return None
    from cyclone_flow.metrics import Metrics, serve_metrics  # prometheus_client only here

    metrics = Metrics()
    try:
        server = serve_metrics(metrics, port, addr)
    except OSError as exc:
        raise click.ClickException(f"cannot serve metrics on {addr}:{port}: {exc}") from None
    logging.getLogger("cyclone_flow").info("metrics on http://%s:%d/metrics", addr, server.port)
    return metrics, server


@click.command("run")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@input_options
@click.option("--workers", type=click.IntRange(min=1), default=4, show_default=True)
@click.option(
    "--import-path",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Folder to put on sys.path (repeatable); the current folder always is.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run status as JSON.")
@database_options
@handle_errors
def run_cmd(
    file: str,
    input_json: str | None,
    input_file: str | None,
    workers: int,
    import_path: tuple[str, ...],
    as_json: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """Migrate, submit FILE and work in-process until that run is terminal; print the
    run's output. Exit 0 when it completed, 1 when it failed. Handlers are imported only
    from the modules the flow names."""
    setup_logging()
    run_input = read_input(input_json, input_file)
    flow = load_flow(file)
    nodes = [n for part in flow.tree() for n in part.nodes.values()]  # with child flows
    modules = {n.call.partition(":")[0] for n in nodes if n.call}
    add_import_paths(import_path)
    url = resolve_database(database_url)
    migrate(url, schema=schema)
    # SIGTERM stops `run` like Ctrl-C: leases released, the run left for other workers
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    client = Client(
        url,
        schema=schema,
        worker_queues=dict.fromkeys(sorted({n.queue for n in nodes}), workers),
        allow_modules=AllowList(exact=modules),
    )
    try:
        run_id = client.submit(flow, run_input)
        if not as_json:
            click.echo(f"run {run_id} of flow {flow.name} submitted", err=True)
        client.start(run_id=run_id)
        try:
            status = follow_run(client, run_id, quiet=as_json)
        except KeyboardInterrupt:
            client.shutdown(timeout=0)  # releases the leases of steps still running
            click.echo(
                f"\ninterrupted: run {run_id} is still running; a `cyclone-flow worker` can "
                f"finish it, or `cyclone-flow cancel {run_id}` stops it",
                err=True,
            )
            sys.exit(130)
        steps = client.list_steps(run_id, items=False) if as_json else None
        progress = client.item_progress(run_id) if as_json else None
    finally:
        client.shutdown()
    if as_json:
        echo_json(_run_dict(status, steps, progress))
    else:
        if status.state == "completed":
            echo_json(status.output)
        else:
            click.echo(f"run {run_id} {status.state}: {status.error}", err=True)
    sys.exit(0 if status.state == "completed" else 1)


def _run_dict(
    run: Run,
    steps: list[Step] | None = None,
    progress: dict[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    data = asdict(run)
    data["state"] = str(run.state)
    if steps is not None:
        data["steps"] = [
            {
                "node": s.node,
                "state": str(s.state),
                "attempt": s.attempt,
                "max_attempts": s.max_attempts,
                "reclaims": s.reclaims,
                "queue": s.queue,
                "started_at": s.started_at,
                "finished_at": s.finished_at,
                "error": s.error,
                "error_kind": s.error_kind,
                "errors": s.errors,  # one entry per failed attempt, with its traceback
                **step_fields(s, progress or {}),
            }
            for s in steps
        ]
    return data


@click.command("status")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True)
@click.option("--items", is_flag=True, help="Also list every fan-out item step.")
@database_options
@handle_errors
def status_cmd(
    run_id: str, as_json: bool, items: bool, database_url: str | None, schema: str
) -> None:
    """Show a run's state and each step's state, attempt, reclaims and error; fan-out
    nodes with their item progress, child nodes with their child run, wait_signal nodes
    with the awaited signal."""
    setup_logging()
    url = resolve_database(database_url)
    with Client(url, schema=schema) as client:
        run = client.get_run(run_id)
        steps = client.list_steps(run_id, items=items)
        progress = client.item_progress(run_id)
        queue_info = client.queue_info(run.id) or {}
    if as_json:
        echo_json({**_run_dict(run, steps, progress), "queue_features": queue_info})
        return
    console = Console(highlight=False)
    console.print(Text.assemble(f"run {run.id}  flow {run.flow_name}  ", (run.state, "bold")))
    for line in queue_info_lines(queue_info):
        console.print(Text(line))
    if run.parent_run_id:
        console.print(Text(f"child run of run {run.parent_run_id} (node {run.parent_node})"))
    if run.deadline_at and run.state == "running":
        console.print(Text(f"deadline: {run.deadline_at.isoformat(timespec='seconds')}"))
    if run.error:
        console.print(Text(f"error: {run.error}"))
    table = Table("node", "state", "attempt", "reclaims", "queue")
    table.add_column("detail", overflow="fold")  # run ids are copied: never cut them
    table.add_column("error")
    for s in steps:
        # a completed step may keep the error of an earlier attempt: --json shows them all
        table.add_row(  # Text cells: error messages are never read as rich markup
            Text(s.node),
            Text(str(s.state)),
            f"{s.attempt}/{s.max_attempts}",
            str(s.reclaims),
            Text(s.queue),
            Text(step_detail(s, progress)),
            Text(f"[{s.error_kind}] {s.error}" if s.error and s.state != "completed" else ""),
        )
    console.print(table)


@click.command("runs")
@click.option("--flow", default=None, help="Only runs of this flow.")
@click.option("--state", type=click.Choice(["running", "completed", "failed", "cancelled"]))
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@database_options
@handle_errors
def runs_cmd(
    flow: str | None,
    state: str | None,
    limit: int,
    as_json: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """List the most recent runs, newest first."""
    setup_logging()
    url = resolve_database(database_url)
    with Client(url, schema=schema) as client:
        runs = client.list_runs(flow=flow, state=state, limit=limit)
    if as_json:
        echo_json([_run_dict(r) for r in runs])
        return
    table = Table("flow", "state", "created", "finished")
    table.add_column("run", no_wrap=True, min_width=36)  # never cut: people copy it
    for r in runs:
        table.add_row(
            Text(r.flow_name),
            str(r.state),
            r.created_at.isoformat(timespec="seconds"),
            r.finished_at.isoformat(timespec="seconds") if r.finished_at else "",
            r.id,
        )
    Console(highlight=False).print(table)


@click.command("cancel")
@click.argument("run_id")
@database_options
@handle_errors
def cancel_cmd(run_id: str, database_url: str | None, schema: str) -> None:
    """Cancel a running run and every step that has not finished."""
    setup_logging()
    url = resolve_database(database_url)
    with Client(url, schema=schema) as client:
        if client.cancel(run_id):
            click.echo(f"run {run_id} cancelled")
            return
        state = client.get_run(run_id).state
    click.echo(f"error: run {run_id} is already {state}; nothing cancelled", err=True)
    sys.exit(1)


@click.command("retry")
@click.argument("run_id", required=False)
@click.option(
    "--node", default=None, help="Retry only this discarded node (and the cancelled steps)."
)
@click.option("--all-failed", is_flag=True, help="Retry every failed run.")
@click.option("--flow", default=None, help="With --all-failed: only runs of this flow.")
@database_options
@handle_errors
def retry_cmd(
    run_id: str | None,
    node: str | None,
    all_failed: bool,
    flow: str | None,
    database_url: str | None,
    schema: str,
) -> None:
    """Put a failed or cancelled run back to work: discarded and cancelled steps are reset
    (attempts and reclaims to zero) and the run is running again."""
    if all_failed == (run_id is not None):
        raise click.UsageError("give a RUN_ID or --all-failed (not both)")
    if node is not None and all_failed:
        raise click.UsageError("--node goes with a RUN_ID, not with --all-failed")
    if flow is not None and not all_failed:
        raise click.UsageError("--flow goes with --all-failed")
    setup_logging()
    url = resolve_database(database_url)
    with Client(url, schema=schema) as client:
        if all_failed:
            retried = client.retry_all(flow)
            for rid in retried:
                click.echo(rid)
            click.echo(f"retried {len(retried)} failed run(s)", err=True)
            return
        assert run_id is not None
        reset = client.retry(run_id, node)
    click.echo(f"run {run_id} retried: {', '.join(reset) or 'no step to redo'}")

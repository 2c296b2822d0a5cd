"""Commands that submit a run: ``submit`` (optionally waiting for it) and ``run`` (submit and
work in-process until the run ends)."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
from typing import Any

import click
from rich.console import Console
from rich.text import Text

from cyclone_flow.cli.common import (
    REVISION,
    add_import_paths,
    compact_table,
    database_options,
    duration_option,
    echo_json,
    handle_errors,
    input_options,
    notify_option,
    out_console,
    prepare_enabled,
    read_input,
    resolve_database,
    setup_logging,
)
from cyclone_flow.cli.flows_cmds import parse_flow_ref
from cyclone_flow.cli.output import HandlerOutput
from cyclone_flow.cli.progress import (
    end_line,
    follow_run,
    logs_above,
    print_ended,
    reported_by_display,
    wait_for_end,
)
from cyclone_flow.cli.show import preview_dict, preview_table_rows, run_dict
from cyclone_flow.cli.submission import (
    chunk_option,
    print_bulk,
    queue_options,
    submission_kwargs,
    submit_lines,
)
from cyclone_flow.client import (
    DEFAULT_CHUNK_SIZE,
    Client,
    RunId,
    RunPreview,
    migrate,
    preview_submit,
)
from cyclone_flow.config import MAX_LEASE_TTL_S
from cyclone_flow.db.errors import Outage, database_lost
from cyclone_flow.db.rows import Run
from cyclone_flow.deployments import FLOW_REFERENCE
from cyclone_flow.durations import MAX_FLOW_DURATION_S
from cyclone_flow.flowfile import load_flow
from cyclone_flow.handlers import AllowList
from cyclone_flow.run_view import RunView


@click.command("submit")
@click.argument("flow_arg", metavar="FILE|NAME[@REV]")
@click.option(
    "--revision",
    type=REVISION,
    default=None,
    help="With a deployed flow NAME: run this revision instead of the current one.",
)
@input_options
@click.option(
    "--inputs-file",
    "inputs_file",
    default=None,
    metavar="FILE.jsonl",
    help="Submit one run per line of this JSON Lines file (its input; - for stdin), "
    "--chunk per transaction; prints the count.",
)
@chunk_option
@queue_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"run_id": ..., "duplicate": ...} (with --wait: the run; with --dry-run: '
    "the plan).",
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
@click.option(
    "--dry-run",
    is_flag=True,
    help="Lint, validate the input and options, print the steps that would be written; "
    "write nothing (no database is used).",
)
@notify_option
@database_options
@handle_errors
def submit_cmd(
    flow_arg: str,
    revision: int | None,
    input_json: str | None,
    input_file: str | None,
    inputs_file: str | None,
    chunk: int | None,
    as_json: bool,
    wait: bool,
    timeout: str | None,
    dry_run: bool,
    notify: bool,
    database_url: str | None,
    schema: str,
    **queue_values: Any,
) -> None:
    """Lint FILE, then write a run of it (definition, run, steps, deps) in one transaction;
    print its id. NAME (no file of that name here; a folder does not count): run the
    current revision of the deployed flow NAME (NAME@REV or --revision N: that revision).
    Queue options:
    docs/queues.md. With --wait, then wait for the run to end (Client.wait: woken by
    cyclone_run_done, polling as the floor; a database restart or a short outage is
    ridden out up to --timeout). With --dry-run, check the same and print the plan (the
    steps in run order with queue, needs and first state) instead: nothing is written,
    no database is used (for a NAME: only to read the revision). With --inputs-file,
    one run per line of a JSON Lines file (streamed, --chunk runs per transaction);
    prints how many were submitted, or the failing FILE:LINE and how many were written
    before it."""
    if inputs_file is not None and (
        input_json is not None or input_file is not None or wait or dry_run
    ):
        raise click.UsageError(
            "--inputs-file goes without --input, --input-file, --wait and --dry-run"
        )
    if chunk is not None and inputs_file is None:
        raise click.UsageError("--chunk goes with --inputs-file")
    if timeout is not None and not wait:
        raise click.UsageError("--timeout goes with --wait")
    if dry_run and wait:
        raise click.UsageError("--dry-run writes no run to wait for: give one of them")
    wait_s = None
    if timeout is not None:
        wait_s = duration_option(timeout, "--timeout", max_s=MAX_FLOW_DURATION_S, allow_zero=True)
    file, name, revision = _flow_target(flow_arg, revision)
    if name is not None and inputs_file is not None:
        raise click.UsageError("--inputs-file takes a flow FILE, not a deployed flow NAME")
    setup_logging()
    run_input = read_input(input_json, input_file)
    options = submission_kwargs(queue_values)
    if name is not None:
        _submit_deployed(
            name,
            revision,
            run_input,
            options,
            as_json=as_json,
            wait=wait,
            wait_s=wait_s,
            dry_run=dry_run,
            notify=notify,
            database_url=database_url,
            schema=schema,
        )
        return
    assert file is not None
    flow = load_flow(file)
    if dry_run:
        _show_plan(preview_submit(flow, run_input, **options), as_json)
        return
    url = resolve_database(database_url)
    if inputs_file is not None:
        with Client(url, schema=schema, prepare=prepare_enabled(), notify=notify) as client:
            _refuse_retired(client, flow.name)
            out = submit_lines(
                inputs_file,
                chunk or DEFAULT_CHUNK_SIZE,
                lambda values: client.submit_many(flow, values, chunk_size=len(values), **options),
                f"submit {flow.name}",
                "--inputs-file",
                as_json=as_json,
            )
        print_bulk(out, "run(s) submitted", as_json)
        return
    client = Client(url, schema=schema, prepare=prepare_enabled(), notify=notify)
    try:
        _refuse_retired(client, flow.name)
        run_id = client.submit(flow, run_input, **options)
        end = _after_submit(client, run_id, flow.name, as_json=as_json, wait=wait, wait_s=wait_s)
    except KeyboardInterrupt:  # before the wait (which says more): no click "Aborted!"
        sys.exit(130)
    finally:
        client.shutdown()
    _ended(end, as_json)


def _flow_target(arg: str, revision: int | None) -> tuple[str | None, str | None, int | None]:
    """(file, deployed flow name, revision) of submit's argument: an existing file, else
    NAME or NAME@REV; a usage error (exit 2) for anything else. A directory is never a
    flow file: ``submit nightly`` in a folder holding a ``nightly/`` folder submits the
    deployed flow."""
    is_dir = os.path.isdir(arg)
    if os.path.exists(arg) and not is_dir:
        if revision is not None:
            raise click.UsageError(
                "--revision goes with a deployed flow NAME, not a flow FILE (a file is "
                "submitted as it is)"
            )
        return arg, None, None
    if not FLOW_REFERENCE.fullmatch(arg):
        what = "is a directory, not a flow file" if is_dir else "does not exist"
        raise click.BadParameter(
            f"file {arg!r} {what}, and it is no deployed flow NAME or NAME@REV.",
            param_hint="'FILE|NAME[@REV]'",
        )
    name, rev = parse_flow_ref(arg, "'FILE|NAME[@REV]'", given=revision)
    return None, name, rev


def _refuse_retired(client: Client, name: str) -> None:
    """Exit 1 when ``name`` is a deployed flow that was retired: its files are refused
    too."""
    deployed = client.get_deployed_flow(name)
    if deployed is None or deployed.retired_at is None:
        return
    by = f" by {deployed.retired_by}" if deployed.retired_by else ""
    when = deployed.retired_at.isoformat(timespec="seconds")
    click.echo(
        f"error: flow {name} is retired (since {when}{by}): new runs of it are refused, "
        f"from a file too; `cyclone-flow deploy` it again to use it",
        err=True,
    )
    sys.exit(1)


def _submit_deployed(
    name: str,
    revision: int | None,
    run_input: Any,
    options: dict[str, Any],
    *,
    as_json: bool,
    wait: bool,
    wait_s: float | None,
    dry_run: bool,
    notify: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """``submit NAME``: a run of the current (or the given) revision of a deployed flow."""
    url = resolve_database(database_url, existing=True)
    client = Client(url, schema=schema, prepare=prepare_enabled(), notify=notify)
    try:
        if dry_run:
            flow = client.load_revision(name, revision)
            _show_plan(preview_submit(flow, run_input, **options), as_json)
            return
        run_id = client.submit(name, run_input, revision=revision, **options)
        end = _after_submit(client, run_id, name, as_json=as_json, wait=wait, wait_s=wait_s)
    except KeyboardInterrupt:
        sys.exit(130)
    finally:
        client.shutdown()
    _ended(end, as_json)


def _after_submit(
    client: Client,
    run_id: RunId,
    flow_name: str,
    *,
    as_json: bool,
    wait: bool,
    wait_s: float | None,
) -> tuple[Run, RunView | None] | None:
    """Print the new run's id (``--json``: with ``duplicate``), or with ``wait`` wait for
    its end: the run then (with ``--json`` its view), for :func:`_ended`."""
    if not wait:
        if as_json:
            echo_json({"run_id": str(run_id), "duplicate": run_id.duplicate})
        else:
            click.echo(run_id)
            if run_id.duplicate:
                click.echo("duplicate: an existing run holds this unique key", err=True)
        return None
    if not as_json:
        click.echo(run_id)
        click.echo(f"waiting for run {run_id} of flow {flow_name} ...", err=True)
    view: RunView | None = None
    status = wait_for_end(client, run_id, as_json=as_json, timeout=wait_s)
    if as_json:  # the run's document lists its steps, as `run --json` does
        view = client.run_view(run_id)
        status = view.run
    return status, view


def _ended(end: tuple[Run, RunView | None] | None, as_json: bool) -> None:
    """After the client was shut down: the end of a waited run (exits), if waited."""
    if end is None:
        return
    status, view = end
    if view is None:
        print_ended(status, as_json)
    print_ended(status, as_json, list(view.steps), view.progress)


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
@notify_option
@click.option(
    "--shared",
    is_flag=True,
    help="Let any `cyclone-flow worker` of the flow's queues take the run's steps too "
    "(default: only this process does while it lives).",
)
@click.option(
    "--lease-ttl",
    default="30s",
    show_default=True,
    help="Lease TTL, e.g. 30s; also how long after a crash of this process its run goes "
    "to the workers.",
)
@database_options
@handle_errors
def run_cmd(
    file: str,
    input_json: str | None,
    input_file: str | None,
    workers: int,
    import_path: tuple[str, ...],
    as_json: bool,
    notify: bool,
    shared: bool,
    lease_ttl: str,
    database_url: str | None,
    schema: str,
) -> None:
    """Migrate, submit FILE and work in-process until that run is terminal; print the
    run's output. Exit 0 when it completed, 1 when it failed. Handlers are imported only
    from the modules the flow names. The run is isolated: only this process claims its
    steps while it lives (unless --shared); when it stops or dies they go to the workers
    (docs/cli.md). A database restart or a short outage is ridden out; when the database
    stays away, the run is left running and the command says how to finish it (exit 1)."""
    ttl = duration_option(lease_ttl, "--lease-ttl", max_s=MAX_LEASE_TTL_S)
    setup_logging()
    run_input = read_input(input_json, input_file)
    flow = load_flow(file)
    nodes = [n for part in flow.tree() for n in part.nodes.values()]  # with child flows
    modules = {n.call.partition(":")[0] for n in nodes if n.call}
    add_import_paths(import_path)
    url = resolve_database(database_url)
    migrate(url, schema=schema, prepare=prepare_enabled())
    # SIGTERM stops `run` like Ctrl-C: leases released, the run left for other workers
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    client = Client(
        url,
        schema=schema,
        worker_queues=dict.fromkeys(sorted({n.queue for n in nodes}), workers),
        allow_modules=AllowList(exact=modules),
        prepare=prepare_enabled(),
        notify=notify,
        lease_ttl=ttl,
    )
    # descriptors 1 and 2 to pipes: a handler's child process writes to its step logs,
    # not before the --json document (issue 31.3); sys.stderr is the real one again
    output = HandlerOutput.start()
    # made before the worker starts: it writes to the real stderr, not to the proxy that
    # keeps a handler thread's writes (a log record printed above the bar is not captured
    # again into the step's logs)
    console = Console(file=sys.stderr, highlight=False)
    try:
        run_id = client.submit(flow, run_input, isolated=not shared)
        if not as_json:
            click.echo(f"run {run_id} of flow {flow.name} submitted", err=True)
        client.start(run_id=run_id)
        # the worker may log a failed attempt or the run's end just after the display saw
        # it: such lines stay left out until the worker stopped (each failure told once);
        # with --json too, whose document tells them (its steps' errors, the run's state)
        with logs_above(None, functools.partial(reported_by_display, run_id)):
            try:
                outage = Outage()  # one spell for all its looks (OUTAGE_GRACE_S in all)
                status = follow_run(client, run_id, console=console, quiet=as_json, outage=outage)
                view: RunView | None = None
                if as_json:  # the run and its steps of one moment
                    view = outage.ride(lambda: client.run_view(run_id))
                    status = view.run
            except KeyboardInterrupt:
                client.shutdown(timeout=0)  # releases the leases of steps still running
                click.echo(f"\ninterrupted: {_still_running(run_id)}", err=True)
                sys.exit(130)
            except Exception as exc:
                if not database_lost(exc):
                    raise
                click.echo(f"error: cannot use the database: {_first_line(exc)}", err=True)
                click.echo(f"gave up: {_still_running(run_id)}", err=True)
                client.shutdown(timeout=0)  # stop working on it; the leases expire by themselves
                sys.exit(1)
            # the run is terminal: nothing left to wait for. A handler still running (a
            # timed-out attempt that ignores ctx.cancelled()) is abandoned: its lease is
            # gone, so its late completion is refused by the lease generation
            client.shutdown(timeout=0)
    finally:
        client.shutdown()
        output.close()
    if view is not None:
        echo_json(run_dict(view.run, list(view.steps), view.progress))
    else:
        if status.state == "completed":
            echo_json(status.output)
        else:
            click.echo(end_line(status), err=True)
    sys.exit(0 if status.state == "completed" else 1)


def _show_plan(plan: RunPreview, as_json: bool) -> None:
    """Print a dry run's plan on stdout (a table, or ``--json``) and, on stderr, that
    nothing was written."""
    if as_json:
        echo_json(preview_dict(plan))
    else:
        console = out_console()
        where = f" ({plan.path})" if plan.path else ""
        console.print(Text(f"flow {plan.flow}{where}: {len(plan.steps)} step(s)"))
        console.print(Text(f"input: {json.dumps(plan.input, ensure_ascii=False)}"))
        if options := preview_dict(plan)["options"]:
            console.print(Text(f"options: {json.dumps(options, ensure_ascii=False)}"))
        headers = ("#", "node", "type", "queue", "priority", "needs", "state", "runs", "limits")
        rows = [[Text(cell) for cell in row] for row in preview_table_rows(plan)]
        console.print(compact_table(headers, rows))  # no limits column without limits
        if plan.child_flows:
            console.print(Text(f"child flows stored with it: {', '.join(plan.child_flows)}"))
    notes = ["dry run: flow, input and options are valid; nothing was written"]
    if plan.options.unique_key is not None:
        notes.append("whether a run holds the unique key is known only at submit")
    if plan.options.sequence is not None:
        notes.append("whether the sequence holds this run is known only at submit")
    click.echo("; ".join(notes), err=True)


def _still_running(run_id: str) -> str:
    return (
        f"run {run_id} is still running; a `cyclone-flow worker` can finish it, or "
        f"`cyclone-flow cancel {run_id}` stops it"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

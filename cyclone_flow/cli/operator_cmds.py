"""Operator commands on runs: ``cancel``, ``retry``, ``rerun``, ``signal`` and ``purge`` (delete
terminal runs older than an age: the same pass a client with ``retention=`` runs in the
background)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import click

from cyclone_flow.cli.common import (
    database_options,
    duration_option,
    echo_json,
    handle_errors,
    input_options,
    notify_option,
    parse_age,
    parse_json,
    prepare_enabled,
    read_input,
    read_payload_file,
    resolve_database,
    setup_logging,
)
from cyclone_flow.cli.progress import print_ended, wait_for_end
from cyclone_flow.client import Client
from cyclone_flow.config import RETENTION_BATCH_SIZE, PayloadLimits
from cyclone_flow.durations import MAX_FLOW_DURATION_S
from cyclone_flow.errors import RunNotFoundError
from cyclone_flow.names import SIGNAL_NAME_RULE, is_signal_name


@click.command("cancel")
@click.argument("run_id")
@database_options
@handle_errors
def cancel_cmd(run_id: str, database_url: str | None, schema: str) -> None:
    """Cancel a running run and every step that has not finished."""
    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        run_id = client.resolve_run_id(run_id)
        if client.cancel(run_id):
            click.echo(f"run {run_id} cancelled")
            return
        state = client.get_run(run_id).state
    click.echo(f"error: run {run_id} is already {state}; nothing cancelled", err=True)
    sys.exit(1)


@click.command("rerun")
@click.argument("run_id")
@click.option(
    "--from",
    "from_nodes",
    multiple=True,
    metavar="NODE",
    help="Rerun from this node: it and everything downstream run again, the rest is "
    "reused (may be given several times).",
)
@click.option(
    "--failed",
    is_flag=True,
    help="Rerun from every discarded or cancelled node (with --from: those too).",
)
@input_options
@click.option(
    "--input-patch",
    "input_patch",
    default=None,
    help="A JSON Merge Patch (RFC 7396) applied to the original run input.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Also rerun the nodes to reuse whose input the new input changes.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the new run id as JSON (with --wait: the finished run).",
)
@click.option(
    "--wait",
    is_flag=True,
    help="Wait until the new run ends (workers elsewhere run it), as submit --wait: exit 0 "
    "when it completed, 1 when it failed or was cancelled.",
)
@click.option(
    "--timeout",
    default=None,
    help="With --wait: give up after this long, e.g. 30s or 5m (exit 1; the run goes on).",
)
@notify_option
@database_options
@handle_errors
def rerun_cmd(
    run_id: str,
    from_nodes: tuple[str, ...],
    failed: bool,
    input_json: str | None,
    input_file: str | None,
    input_patch: str | None,
    force: bool,
    as_json: bool,
    wait: bool,
    timeout: str | None,
    notify: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """Rerun a finished run from chosen nodes as a new run linked to it (rerun_of): the
    nodes upstream of them take the original's outputs without running, they and
    everything downstream run again. Exit 1 when the rerun is refused (a node to reuse
    did not complete, or the new input changes what it read: --force reruns it too).
    With --wait, then wait for the new run as `submit --wait` does (same output and exit
    codes; Ctrl-C: 130, the run goes on)."""
    if not from_nodes and not failed:
        raise click.UsageError("give --from NODE (one or more), --failed, or both")
    if timeout is not None and not wait:
        raise click.UsageError("--timeout goes with --wait")
    wait_s = None
    if timeout is not None:
        wait_s = duration_option(timeout, "--timeout", max_s=MAX_FLOW_DURATION_S, allow_zero=True)
    run_input = read_input(input_json, input_file)
    given = input_json is not None or input_file is not None
    if given and input_patch is not None:
        raise click.UsageError("give --input / --input-file or --input-patch, not both")
    patch = (
        None if input_patch is None else parse_json(input_patch, "--input-patch", "--input-patch")
    )
    if given and run_input is None:
        raise click.UsageError("a rerun keeps the original input unless given one: null is not")
    setup_logging()
    url = resolve_database(database_url, existing=True)
    client = Client(url, schema=schema, prepare=prepare_enabled(), notify=notify)
    try:
        source = client.resolve_run_id(run_id)
        new_id = client.rerun(
            source,
            list(from_nodes),
            run_input,
            input_patch=patch,
            failed=failed,
            force=force,
        )
        steps = client.list_steps(new_id, items=False)
        reused = [s.node for s in steps if s.reused_from is not None]
        again = [s.node for s in steps if s.reused_from is None]
        if as_json and not wait:
            echo_json({"run_id": new_id, "rerun_of": source, "rerun": again, "reused": reused})
            return
        if not as_json:
            click.echo(f"run {new_id}: rerun of run {source}")
            click.echo(f"  reused: {', '.join(reused) or 'nothing'}")
            click.echo(f"  runs again: {', '.join(again)}")
        if not wait:
            return
        if not as_json:
            click.echo(f"waiting for run {new_id} ...", err=True)
        progress: Mapping[str, Mapping[str, int]] | None = None
        status = wait_for_end(client, new_id, as_json=as_json, timeout=wait_s)
        if as_json:  # the finished run and its steps of one moment, as `submit --wait --json`
            view = client.run_view(new_id)
            status, steps, progress = view.run, list(view.steps), view.progress
    except KeyboardInterrupt:  # before the wait (which says more): no click "Aborted!"
        sys.exit(130)
    finally:
        client.shutdown()
    # with --json: the finished run (its rerun_of), and what the rerun reused and reran
    print_ended(status, as_json, steps, progress, rerun=again, reused=reused)


RETRY_PREVIEW_RUNS = 10
"""Failed runs ``retry --all-failed`` lists before it asks (the count says the rest)."""


@click.command("retry")
@click.argument("run_id", required=False)
@click.option(
    "--node", default=None, help="Retry only this discarded node (and the cancelled steps)."
)
@click.option(
    "--all-failed",
    is_flag=True,
    help="Retry every failed run: lists them and asks first (on a terminal).",
)
@click.option("--flow", default=None, help="With --all-failed: only runs of this flow.")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="With --all-failed: do not ask (needed when stdin is not a terminal).",
)
@database_options
@handle_errors
def retry_cmd(
    run_id: str | None,
    node: str | None,
    all_failed: bool,
    flow: str | None,
    yes: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """Put a failed or cancelled run back to work: discarded and cancelled steps are reset
    (attempts and reclaims to zero) and the run is running again. --all-failed first lists
    the failed runs (how many, the first ones) and asks; without a terminal to ask on it
    retries only with --yes (else exit 2, nothing retried)."""
    if all_failed == (run_id is not None):
        raise click.UsageError("give a RUN_ID or --all-failed (not both)")
    if node is not None and all_failed:
        raise click.UsageError("--node goes with a RUN_ID, not with --all-failed")
    if flow is not None and not all_failed:
        raise click.UsageError("--flow goes with --all-failed")
    if yes and not all_failed:
        raise click.UsageError("--yes goes with --all-failed")
    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        if all_failed:
            _retry_all_failed(client, flow, yes)
            return
        assert run_id is not None
        run_id = client.resolve_run_id(run_id)
        reset = client.retry(run_id, node)
    click.echo(f"run {run_id} retried: {', '.join(reset) or 'no step to redo'}")


def _retry_all_failed(client: Client, flow: str | None, yes: bool) -> None:
    """``retry --all-failed``: the preview on stderr, the confirmation, then the retried
    ids on stdout (only runs of the preview: a run that failed after it waits for the next
    one)."""
    failed = client.list_failed_run_ids(flow)
    if failed:
        of = f" of flow {flow}" if flow is not None else ""
        click.echo(f"{len(failed)} failed run(s){of} to retry:", err=True)
        for rid in failed[:RETRY_PREVIEW_RUNS]:
            click.echo(f"  {_preview_line(client, rid)}", err=True)
        if len(failed) > RETRY_PREVIEW_RUNS:
            click.echo(f"  ... and {len(failed) - RETRY_PREVIEW_RUNS} more", err=True)
        if not yes:
            if not sys.stdin.isatty():
                click.echo(
                    "error: retry --all-failed asks before it retries, and stdin is not a "
                    "terminal: pass --yes to retry these runs; nothing was retried",
                    err=True,
                )
                sys.exit(2)
            if not click.confirm(f"retry {len(failed)} run(s)?", err=True):
                click.echo("nothing retried", err=True)
                sys.exit(1)
    retried = client.retry_all(flow, only=failed)
    for rid in retried:
        click.echo(rid)
    click.echo(f"retried {len(retried)} failed run(s)", err=True)


def _preview_line(client: Client, run_id: str) -> str:
    """One run of the preview: id, flow, when it finished, its error (first line)."""
    try:
        run = client.get_run(run_id)
    except RunNotFoundError:
        return f"{run_id}  (purged meanwhile)"
    when = run.finished_at.isoformat(timespec="seconds") if run.finished_at else ""
    error = (run.error or "").strip().splitlines()
    return f"{run.id}  {run.flow_name}  {when}  {error[0] if error else ''}".rstrip()


@click.command("signal")
@click.argument("run_id")
@click.argument("name")
@click.option("--payload", default=None, help="The signal's payload as JSON (default null).")
@click.option(
    "--payload-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Read the payload (JSON) from a file.",
)
@database_options
@handle_errors
def signal_cmd(
    run_id: str,
    name: str,
    payload: str | None,
    payload_file: str | None,
    database_url: str | None,
    schema: str,
) -> None:
    """Send signal NAME to run RUN_ID: a wait_signal node of the run waiting for NAME
    completes with the payload as its output (a signal sent before the node waits is kept
    until it does). Exit 1 for an unknown or finished run, a signal no node awaits, or a
    payload over the signal size limit (256 KiB); exit 2 for a bad signal name, a payload
    that is not JSON, or a --payload-file larger than that limit (never read further)."""
    if not is_signal_name(name):
        raise click.BadParameter(
            f"invalid signal name {name!r}: {SIGNAL_NAME_RULE}", param_hint="NAME"
        )
    if payload is not None and payload_file is not None:
        raise click.UsageError("give --payload or --payload-file, not both")
    text, source = payload, "--payload"
    if payload_file is not None:
        limit = PayloadLimits().signal_bytes
        text = read_payload_file(payload_file, "--payload-file", "signal", limit)
        source = "--payload-file"
    value: Any = None
    if text is not None:
        value = parse_json(text, source)
    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        run_id = client.resolve_run_id(run_id)
        node = client.signal(run_id, name, value)
    if node is None:
        click.echo(
            f"signal {name} kept for run {run_id}: a node consumes it when it starts waiting"
        )
    else:
        click.echo(f"signal {name} delivered to node {node} of run {run_id}")


@click.command("purge")
@click.option(
    "--older-than",
    required=True,
    metavar="DURATION",
    help="Delete completed, failed and cancelled runs that finished longer ago than this "
    "(e.g. 7d, 12h, 30m).",
)
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1, max=100_000),
    default=RETENTION_BATCH_SIZE,
    show_default=True,
    help="Runs deleted per statement.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@database_options
@handle_errors
def purge_cmd(
    older_than: str,
    dry_run: bool,
    batch_size: int,
    as_json: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """Delete terminal runs older than --older-than, with their steps and deps; running
    runs are never touched. Safe while workers run and while other purges run."""
    age = parse_age(older_than, "--older-than")
    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        if dry_run:
            runs, steps = client.count_purgeable(age)
        else:
            runs, steps = client.purge(age, batch_size=batch_size), None
    if as_json:
        data: dict[str, object] = {"dry_run": dry_run, "older_than_s": age, "runs": runs}
        if steps is not None:
            data["steps"] = steps
        echo_json(data)
    elif dry_run:
        click.echo(f"would delete {runs} run(s) with {steps} step(s)")
    else:
        click.echo(f"deleted {runs} run(s)")

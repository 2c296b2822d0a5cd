"""``cyclone-flow enqueue``: a standalone job, or one per line of a JSON Lines file. See
docs/queues.md.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from cyclone_flow.cli.common import (
    database_options,
    echo_json,
    handle_errors,
    notify_option,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.cli.progress import wait_for_end
from cyclone_flow.cli.submission import (
    chunk_option,
    duration_value,
    json_arg,
    print_bulk,
    queue_options,
    submission_kwargs,
    submit_lines,
)
from cyclone_flow.client import DEFAULT_CHUNK_SIZE, Client


@click.command("enqueue")
@click.argument("callable_path", metavar="CALLABLE")
@click.option("--args", "args_json", default=None, help="The job's args as JSON.")
@click.option(
    "--args-file",
    "args_file",
    default=None,
    metavar="FILE.jsonl",
    help="Enqueue one job per line of this JSON Lines file (its args; - for stdin), "
    "--chunk per transaction; prints the count.",
)
@chunk_option
@queue_options
@click.option(
    "--retry",
    "max_attempts",
    type=click.IntRange(1, 1000),
    default=None,
    help="Attempts in all (default 1).",
)
@click.option("--timeout", default=None, help="Timeout of one attempt, e.g. 30s.")
@click.option("--wait", is_flag=True, help="Wait until the job's run ends; print its output.")
@click.option(
    "--wait-timeout",
    default=None,
    help="With --wait: give up after this long, e.g. 30s or 5m (exit 1; the job goes on).",
)
@notify_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_options
@handle_errors
def enqueue_cmd(
    callable_path: str,
    args_json: str | None,
    args_file: str | None,
    chunk: int | None,
    max_attempts: int | None,
    timeout: str | None,
    wait: bool,
    wait_timeout: str | None,
    notify: bool,
    as_json: bool,
    database_url: str | None,
    schema: str,
    **queue_values: Any,
) -> None:
    """Enqueue a standalone job: a one-node run of CALLABLE (package.module:function),
    executed by a worker allowed to import it. Prints the run id. With --args-file, one
    job per line of a JSON Lines file (streamed, --chunk jobs per transaction); prints
    how many were enqueued, or the failing FILE:LINE and how many were written before it.
    With --wait, waits as `submit --wait` does (--wait-timeout: exit 1; Ctrl-C: 130).
    """
    setup_logging()
    if args_file is not None and (args_json is not None or wait):
        raise click.UsageError("--args-file goes without --args and --wait")
    if wait_timeout is not None and not wait:
        raise click.UsageError("--wait-timeout goes with --wait")
    wait_s = duration_value(wait_timeout, "--wait-timeout", allow_zero=True)
    if chunk is not None and args_file is None:
        raise click.UsageError("--chunk goes with --args-file")
    args = json_arg(args_json, "--args")
    options = submission_kwargs(queue_values)
    if max_attempts is not None:
        options["retry"] = max_attempts
    if timeout is not None:
        options["timeout"] = duration_value(timeout, "--timeout", allow_zero=False)
    url = resolve_database(database_url)
    if args_file is not None:
        with Client(url, schema=schema, prepare=prepare_enabled(), notify=notify) as client:
            out = submit_lines(
                args_file,
                chunk or DEFAULT_CHUNK_SIZE,
                lambda values: client.enqueue_many(
                    callable_path, values, chunk_size=len(values), **options
                ),
                f"enqueue {callable_path}",
                "--args-file",
                unit="jobs",
                as_json=as_json,
            )
        print_bulk(out, "job(s) enqueued", as_json)
        return
    client = Client(url, schema=schema, prepare=prepare_enabled(), notify=notify)
    try:
        run_id = client.enqueue(callable_path, args, **options)
        status = None
        if wait:
            status = wait_for_end(client, run_id, as_json=as_json, timeout=wait_s, quiet=True)
    except KeyboardInterrupt:  # before the wait (which says more): no click "Aborted!"
        sys.exit(130)
    finally:
        client.shutdown()
    if as_json:
        data: dict[str, Any] = {"run_id": str(run_id), "duplicate": run_id.duplicate}
        if status is not None:
            data.update(state=str(status.state), output=status.output, error=status.error)
        echo_json(data)
    else:
        click.echo(str(run_id))
        if run_id.duplicate:
            click.echo("duplicate: an existing run holds this unique key", err=True)
        if status is not None:
            if status.state == "completed":
                echo_json(status.output)
            else:
                click.echo(f"run {run_id} {status.state}: {status.error}", err=True)
    if status is not None and status.state != "completed":
        sys.exit(1)

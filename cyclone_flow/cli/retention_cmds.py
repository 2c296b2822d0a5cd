"""``cyclone-flow purge``: delete terminal runs older than an age (Client Options:
WithRetentionSweep; the same pass a client with ``retention=`` runs in the background)."""

from __future__ import annotations

import click

from cyclone_flow.cli.common import (
    database_options,
    duration_option,
    echo_json,
    handle_errors,
    resolve_database,
    setup_logging,
)
from cyclone_flow.client import Client
from cyclone_flow.config import RETENTION_BATCH_SIZE

MAX_AGE_S = 100 * 366 * 86_400.0  # a century: anything longer is a typo


def parse_age(value: str, option: str) -> float:
    """A positive retention age such as ``7d`` as seconds; a click usage error if not."""
    return duration_option(value, option, max_s=MAX_AGE_S)


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
    url = resolve_database(database_url)
    with Client(url, schema=schema) as client:
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

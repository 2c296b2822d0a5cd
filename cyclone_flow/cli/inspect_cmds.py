"""Commands that show runs: ``status`` (one run and its steps) and ``runs`` (the most
recent runs)."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cyclone_flow.cli.common import (
    database_options,
    echo_json,
    handle_errors,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.cli.render import queue_info_lines, run_dict, step_detail
from cyclone_flow.client import Client


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
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        run = client.get_run(run_id)
        steps = client.list_steps(run_id, items=items)
        progress = client.item_progress(run_id)
        queue_info = client.queue_info(run.id) or {}
    if as_json:
        echo_json({**run_dict(run, steps, progress), "queue_features": queue_info})
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
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        runs = client.list_runs(flow=flow, state=state, limit=limit)
    if as_json:
        echo_json([run_dict(r) for r in runs])
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

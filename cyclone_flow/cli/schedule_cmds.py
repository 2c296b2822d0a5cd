"""``cyclone-flow schedule list|add|remove|pause|resume|sync|trigger``. See docs/queues.md."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import click
from rich.text import Text

from cyclone_flow.cli.common import (
    database_options,
    echo_json,
    handle_errors,
    out_console,
    out_table,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.cli.submission import json_arg
from cyclone_flow.client import Client
from cyclone_flow.flowfile import load_flow


@click.group("schedule")
def schedule_group() -> None:
    """Cron schedules: list, add, remove, pause, resume, trigger, and sync a flow file's
    schedules."""


@schedule_group.command("list")
@click.option("--json", "as_json", is_flag=True)
@database_options
@handle_errors
def schedule_list_cmd(as_json: bool, database_url: str | None, schema: str) -> None:
    """List every schedule: its state (active or paused), source (flow or manual) and next
    tick (none while paused)."""
    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        rows = client.list_schedules()
    if as_json:
        echo_json(
            [
                {
                    "name": r.name,
                    "flow": r.flow_name,
                    "cron": r.cron,
                    "timezone": r.timezone,
                    "input": r.input,
                    "state": "paused" if r.paused else "active",
                    "source": r.source,
                    "paused": r.paused,
                    "next_run_at": None if r.paused else r.next_run_at,
                    "last_run_at": r.last_run_at,
                    "last_run_id": r.last_run_id,
                }
                for r in rows
            ]
        )
        return
    if not rows:
        click.echo("no schedules")
        return
    table = out_table("name", "flow", "cron", "timezone", "state", "source", "next run (UTC)")
    for r in rows:
        table.add_row(
            Text(r.name),
            Text(r.flow_name),
            Text(r.cron),
            Text(r.timezone),
            "paused" if r.paused else "active",
            r.source,
            "-" if r.paused else r.next_run_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        )
    out_console().print(table)


@schedule_group.command("sync")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@database_options
@handle_errors
def schedule_sync_cmd(files: tuple[str, ...], database_url: str | None, schema: str) -> None:
    """Make each flow FILE's `schedules:` the active schedules of that flow: create or
    update them by name, remove the ones the file no longer declares (run it on deploy)."""
    setup_logging()
    flows = [load_flow(f) for f in files]
    url = resolve_database(database_url)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        for flow in flows:
            result = client.sync_schedules(flow)
            parts = [
                f"{label} {', '.join(names)}"
                for label, names in (
                    ("added", result.added),
                    ("updated", result.updated),
                    ("removed", result.removed),
                )
                if names
            ]
            click.echo(f"{flow.name}: {'; '.join(parts) or 'no schedules'}")


@schedule_group.command("add")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@click.option("--cron", required=True, help="Cron expression, e.g. '*/5 * * * *'.")
@click.option("--timezone", default="UTC", show_default=True, help="IANA time zone.")
@click.option("--input", "input_json", default=None, help="Run input of every tick (JSON).")
@click.option("--name", default=None, help="Schedule name (default: flow name + digest).")
@database_options
@handle_errors
def schedule_add_cmd(
    file: str,
    cron: str,
    timezone: str,
    input_json: str | None,
    name: str | None,
    database_url: str | None,
    schema: str,
) -> None:
    """Add a schedule that submits a run of FILE at every tick of --cron."""
    setup_logging()
    run_input = json_arg(input_json, "--input")
    flow = load_flow(file)
    url = resolve_database(database_url)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        added = client.add_schedule(flow, cron, timezone=timezone, input=run_input, name=name)
        row = client.get_schedule(added)
    if row is not None and row.paused:  # an existing schedule of that name, paused
        click.echo(f"schedule {added}: paused (resume it to run)")
        return
    when = row.next_run_at.isoformat(timespec="seconds") if row else "?"
    click.echo(f"schedule {added}: next run at {when}")


def _by_name(action: str) -> Any:
    @click.argument("name")
    @database_options
    @handle_errors
    def command(name: str, database_url: str | None, schema: str) -> None:
        setup_logging()
        url = resolve_database(database_url, existing=True)
        with Client(url, schema=schema, prepare=prepare_enabled()) as client:
            getattr(client, f"{action}_schedule")(name)
        click.echo(f"schedule {name} {action}d")

    return command


schedule_group.command("remove", help="Delete a schedule (its runs stay).")(_by_name("remove"))
schedule_group.command("pause", help="Stop a schedule from submitting runs.")(_by_name("pause"))
schedule_group.command(
    "resume", help="Resume a paused schedule from its next tick (missed ticks are skipped)."
)(_by_name("resume"))


@schedule_group.command("trigger")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help='Print {"schedule", "run_id", "duplicate"}.')
@database_options
@handle_errors
def schedule_trigger_cmd(name: str, as_json: bool, database_url: str | None, schema: str) -> None:
    """Submit one run of schedule NAME now, outside its cadence (its next tick is
    unchanged); prints the run id."""
    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        run_id = client.trigger_schedule(name)
    if as_json:
        echo_json({"schedule": name, "run_id": str(run_id), "duplicate": run_id.duplicate})
        return
    click.echo(run_id)

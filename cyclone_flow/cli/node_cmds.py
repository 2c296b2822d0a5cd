"""``cyclone-flow signal``, and how ``status`` and ``graph --run`` describe the node types:
item progress of fan-out nodes, the child run of child nodes, the awaited signal of
wait_signal nodes."""

from __future__ import annotations

from typing import Any

import click

from cyclone_flow.cli.common import (
    database_options,
    handle_errors,
    parse_json,
    read_payload_file,
    resolve_database,
    setup_logging,
)
from cyclone_flow.client import SIGNAL_NAME_RE, Client
from cyclone_flow.config import PayloadLimits
from cyclone_flow.db.rows import Step

__all__ = ["signal_cmd", "step_detail", "step_fields"]


def step_detail(step: Step, progress: dict[str, dict[str, int]]) -> str:
    """One line about a step's node type: ``items 42/100 done, 8 running`` for a fan-out
    node, ``child run ID`` for a child node, ``awaits signal 'NAME'`` for a wait_signal
    node, ``item 3 of NODE`` for a fan-out item; "" for an action."""
    if step.parent_node is not None:
        return f"item {step.item_index} of {step.parent_node}"
    if step.type == "fan_out":
        if step.items_total is None:
            return "items: not started"
        counts = progress.get(step.node, {})
        text = f"items {step.items_done or 0}/{step.items_total} done"
        for state in ("running", "available", "discarded", "cancelled"):
            if counts.get(state):
                text += f", {counts[state]} {state}"
        return text
    if step.type == "child":
        return f"child run {step.child_run_id}" if step.child_run_id else "child run: not started"
    if step.type == "wait_signal":
        if step.state == "waiting":
            until = (
                f" until {step.wait_until.isoformat(timespec='seconds')}" if step.wait_until else ""
            )
            return f"awaits signal {step.signal!r}{until}"
        return f"signal {step.signal!r}"
    return ""


def step_fields(step: Step, progress: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The node-type fields of a step for ``--json`` output (only those that apply)."""
    out: dict[str, Any] = {"type": step.type}
    if step.parent_node is not None:
        out.update(parent_node=step.parent_node, item_index=step.item_index)
    if step.type == "fan_out":
        out["items"] = {
            "total": step.items_total,
            "done": step.items_done,
            "states": progress.get(step.node, {}),
        }
    if step.type == "child":
        out["child_run_id"] = step.child_run_id
    if step.type == "wait_signal":
        out["signal"] = step.signal
    if step.type in ("child", "wait_signal"):
        out["wait_until"] = step.wait_until
    return out


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
    if not SIGNAL_NAME_RE.fullmatch(name):
        raise click.BadParameter(
            f"invalid signal name {name!r}: letters, digits, '_', '.', ':', '-' (at most 128, "
            "not starting with '.', ':' or '-')",
            param_hint="NAME",
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
    url = resolve_database(database_url)
    with Client(url, schema=schema) as client:
        node = client.signal(run_id, name, value)
    if node is None:
        click.echo(
            f"signal {name} kept for run {run_id}: a node consumes it when it starts waiting"
        )
    else:
        click.echo(f"signal {name} delivered to node {node} of run {run_id}")

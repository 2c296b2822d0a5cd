"""The ``cyclone-flow`` command line."""

from __future__ import annotations

import click

from cyclone_flow.cli.engine_cmds import (
    cancel_cmd,
    migrate_cmd,
    retry_cmd,
    run_cmd,
    runs_cmd,
    status_cmd,
    submit_cmd,
    worker_cmd,
)
from cyclone_flow.cli.lint_cmds import graph, lint
from cyclone_flow.cli.node_cmds import signal_cmd
from cyclone_flow.cli.queue_cmds import enqueue_cmd, schedule_group
from cyclone_flow.cli.retention_cmds import purge_cmd


@click.group()
def main() -> None:
    """cyclone-flow: Postgres-backed workflow engine with YAML flows."""


main.add_command(lint)
main.add_command(graph)
for _command in (
    migrate_cmd,
    submit_cmd,
    worker_cmd,
    run_cmd,
    status_cmd,
    runs_cmd,
    cancel_cmd,
    retry_cmd,
    enqueue_cmd,
    schedule_group,
    purge_cmd,
    signal_cmd,
):
    main.add_command(_command)

"""The ``cyclone-flow`` command line, one module per command family: ``lint_cmds`` (lint,
graph), ``schema_cmds`` (migrate), ``submit_cmds`` (submit, run), ``queue_cmds`` (enqueue,
schedule), ``worker_cmd`` (worker), ``inspect_cmds`` (status, runs, logs, workers),
``operator_cmds`` (cancel, retry, signal, purge); ``common`` (options, errors, logging),
``render`` (how runs and steps are shown) and ``progress`` (live progress of a run) are
shared. Every command goes through the :class:`cyclone_flow.Client`'s public methods."""

from __future__ import annotations

import click

from cyclone_flow.cli.inspect_cmds import logs_cmd, runs_cmd, status_cmd, workers_cmd
from cyclone_flow.cli.lint_cmds import graph, lint
from cyclone_flow.cli.operator_cmds import cancel_cmd, purge_cmd, retry_cmd, signal_cmd
from cyclone_flow.cli.queue_cmds import enqueue_cmd, schedule_group
from cyclone_flow.cli.schema_cmds import migrate_cmd
from cyclone_flow.cli.submit_cmds import run_cmd, submit_cmd
from cyclone_flow.cli.worker_cmd import worker_cmd


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
    workers_cmd,
    logs_cmd,
):
    main.add_command(_command)

"""The ``cyclone-flow`` command line, one module per command or command family, named after
it: ``lint_cmds`` (lint, graph), ``migrate_cmd`` (migrate), ``submit_cmds`` (submit, run),
``enqueue_cmd`` (enqueue), ``schedule_cmds`` (schedule), ``deploy_cmds`` (deploy, diff),
``flows_cmds`` (flows list|history|show|diff|rollback|retire), ``worker_cmd`` (worker),
``inspect_cmds`` (status, runs, logs, output, workers), ``operator_cmds`` (cancel, rerun,
retry, signal, purge), ``doctor_cmd`` (doctor), ``init_cmds`` (init: a new project's files),
``embedded_cmds`` (embedded status|url|stop), ``ui_cmd`` (ui, the web dashboard);
``processes`` (``worker --processes N``'s supervisor) and ``reload`` (``worker --reload``'s);
``common`` (options, errors, logging), ``submission`` (the submission options shared by
submit, enqueue and schedule), ``show`` (how runs, steps and dry runs are laid out; the
words are :mod:`cyclone_flow.describe`'s), ``progress`` (live progress of a run), ``watch``
(``status --watch``) and ``output`` (descriptors 1 and 2 of a process that runs handlers)
are shared. Every command goes through the :class:`cyclone_flow.Client`'s public methods."""

from __future__ import annotations

from typing import IO, Any

import click

from cyclone_flow.cli.deploy_cmds import deploy_cmd, diff_cmd
from cyclone_flow.cli.doctor_cmd import doctor_cmd
from cyclone_flow.cli.embedded_cmds import embedded_group
from cyclone_flow.cli.enqueue_cmd import enqueue_cmd
from cyclone_flow.cli.flows_cmds import flows_group
from cyclone_flow.cli.init_cmds import init_cmd
from cyclone_flow.cli.inspect_cmds import (
    logs_cmd,
    output_cmd,
    runs_cmd,
    status_cmd,
    workers_cmd,
)
from cyclone_flow.cli.lint_cmds import graph, lint
from cyclone_flow.cli.migrate_cmd import migrate_cmd
from cyclone_flow.cli.operator_cmds import (
    cancel_cmd,
    purge_cmd,
    rerun_cmd,
    retry_cmd,
    signal_cmd,
)
from cyclone_flow.cli.schedule_cmds import schedule_group
from cyclone_flow.cli.submit_cmds import run_cmd, submit_cmd
from cyclone_flow.cli.ui_cmd import ui_cmd
from cyclone_flow.cli.worker_cmd import worker_cmd


def _show(exc: click.ClickException, file: IO[Any] | None = None) -> None:
    """Print a click error as every cyclone-flow error is printed: ``error: message``
    (lowercase ``error``), after the usage and help hint of a usage error."""
    ctx = exc.ctx if isinstance(exc, click.UsageError) else None
    if ctx is not None:
        hint = ""
        if ctx.command.get_help_option(ctx) is not None:
            names = ctx.command.get_help_option_names(ctx)
            hint = f"Try '{ctx.command_path} {max(names, key=len)}' for help.\n"
        click.echo(f"{ctx.get_usage()}\n{hint}", file=file, err=True, color=ctx.color)
    message = exc.format_message()
    if message[:1].isupper() and message[1:2].islower():  # "Invalid value", not "FILE"
        message = message[0].lower() + message[1:]
    click.echo(f"error: {message}", file=file, err=True, color=ctx.color if ctx else None)


def _restyled(exc: click.ClickException) -> click.ClickException:
    setattr(exc, "show", lambda file=None: _show(exc, file))  # noqa: B010 (an instance's)
    return exc


class _Main(click.Group):
    """The top command: click's own errors (a bad option value, a missing argument, an
    unknown command) are printed with the same ``error:`` prefix as the commands' own;
    the exit code stays click's (2 for a usage error)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            raise _restyled(exc) from exc.__cause__

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            raise _restyled(exc) from exc.__cause__


@click.group(cls=_Main)
@click.version_option(
    package_name="cyclone-flow", prog_name="cyclone-flow", message="%(prog)s %(version)s"
)
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
    rerun_cmd,
    enqueue_cmd,
    schedule_group,
    deploy_cmd,
    diff_cmd,
    flows_group,
    purge_cmd,
    signal_cmd,
    workers_cmd,
    logs_cmd,
    output_cmd,
    init_cmd,
    embedded_group,
    ui_cmd,
    doctor_cmd,
):
    main.add_command(_command)

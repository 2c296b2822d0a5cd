"""The ``cyclone-flow`` command line."""

from __future__ import annotations

import click

from cyclone_flow.cli.lint_cmds import graph, lint


@click.group()
def main() -> None:
    """cyclone-flow: Postgres-backed workflow engine with YAML flows."""


main.add_command(lint)
main.add_command(graph)

"""``cyclone-flow migrate``: apply the missing schema migrations."""

from __future__ import annotations

import click

from cyclone_flow.cli.common import (
    database_options,
    handle_errors,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.client import migrate


@click.command("migrate")
@database_options
@handle_errors
def migrate_cmd(database_url: str | None, schema: str) -> None:
    """Apply the missing schema migrations (safe to run from many processes at once)."""
    setup_logging()
    url = resolve_database(database_url)
    applied = migrate(url, schema=schema, prepare=prepare_enabled())
    if applied:
        click.echo(f"applied migrations {', '.join(map(str, applied))} to schema {schema}")
    else:
        click.echo(f"schema {schema} is up to date")

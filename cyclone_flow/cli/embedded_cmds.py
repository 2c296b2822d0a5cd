"""``cyclone-flow embedded status|url|stop``: the embedded Postgres of this folder (under
``./.cyclone``, or ``CYCLONE_HOME``), read from its files without starting or joining it;
``stop`` stops a server that a killed command left running."""

from __future__ import annotations

import sys

import click

from cyclone_flow.cli.common import echo_json, handle_errors
from cyclone_flow.embedded import EmbeddedInfo, embedded_info, other_homes, stop_embedded


def _info_dict(info: EmbeddedInfo) -> dict[str, object]:
    return {
        "home": str(info.home),
        "data_dir": str(info.data_dir),
        "exists": info.exists,
        "running": info.running,
        "pid": info.pid,
        "url": info.url,
        "status": info.status,
        "users": list(info.users),
        "stale_users": list(info.stale_users),
    }


@click.group("embedded")
def embedded_group() -> None:
    """The embedded Postgres of this folder (./.cyclone, or CYCLONE_HOME)."""


@embedded_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the state as a JSON object.")
@handle_errors
def embedded_status_cmd(as_json: bool) -> None:
    """Say whether an embedded server runs for this folder: its data folder, pid, URL and
    the processes using it. Starts nothing; exit 0 either way."""
    info = embedded_info()
    if as_json:
        echo_json(_info_dict(info))
        return
    click.echo(f"data dir: {info.data_dir}")
    if not info.exists:
        click.echo("database: none (a database command run here creates one)")
        for home in other_homes():
            click.echo(f"found: {home} (run from {home.parent} or set CYCLONE_HOME={home})")
    if info.running:
        click.echo(f"server: running, pid {info.pid} ({info.status or 'unknown'})")
        click.echo(f"url: {info.url}")
    else:
        click.echo("server: not running")
    if info.users:
        click.echo(f"used by: pid {', '.join(map(str, info.users))}")
    if info.stale_users:
        gone = ", ".join(map(str, info.stale_users))
        click.echo(
            f"gone users: pid {gone} (killed: the server does not stop by itself; "
            "`cyclone-flow embedded stop` stops it)"
            if info.running
            else f"gone users: pid {gone}"
        )


@embedded_group.command("url")
@handle_errors
def embedded_url_cmd() -> None:
    """Print the URL of the embedded server running for this folder (exit 1 when none
    runs), e.g. for psql or --database-url."""
    info = embedded_info()
    if info.url is None:
        click.echo(f"error: no embedded Postgres runs in {info.data_dir}", err=True)
        sys.exit(1)
    click.echo(info.url)


@embedded_group.command("stop")
@click.option(
    "--force",
    is_flag=True,
    help="Stop it even while live cyclone-flow processes use it (they lose their connections).",
)
@handle_errors
def embedded_stop_cmd(force: bool) -> None:
    """Stop the embedded server of this folder (pg_ctl stop -m fast), for one a killed
    command left running. Refuses (exit 1) while live processes use it, unless --force;
    exit 0 when none runs."""
    info = stop_embedded(force=force)
    if info.running:
        click.echo(f"stopped the embedded Postgres in {info.data_dir} (pid {info.pid})")
    else:
        click.echo(f"no embedded Postgres runs in {info.data_dir}")

"""``cyclone-flow ui``: serve the web dashboard (:mod:`cyclone_flow.ui`, the ``ui`` extra,
imported only here and only when the command runs, so the core install works without it).

It binds 127.0.0.1 by default; any other host needs ``CYCLONE_UI_TOKEN`` (HTTP basic
auth: any user name, the token as password) or ``--no-auth``, which prints a warning."""

from __future__ import annotations

import ipaddress
import os
import threading
import webbrowser

import click

from cyclone_flow.cli.common import (
    database_options,
    handle_errors,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.client import Client

TOKEN_ENV = "CYCLONE_UI_TOKEN"
"""The environment variable holding the dashboard's password (basic auth) or bearer token."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="TCP port."
)
@click.option("--read-only", is_flag=True, help="No actions: every POST is answered 405.")
@click.option("--open", "open_browser", is_flag=True, help="Open the dashboard in a browser.")
@click.option(
    "--no-auth",
    is_flag=True,
    help=f"Serve a non-loopback host without {TOKEN_ENV} (anyone who reaches it can act).",
)
@database_options
@handle_errors
def ui_cmd(
    host: str,
    port: int,
    read_only: bool,
    open_browser: bool,
    no_auth: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """Serve the web dashboard: runs, their live DAG, why a step waits, and actions
    (cancel, retry, signal, schedules) unless --read-only."""
    token = os.environ.get(TOKEN_ENV) or None
    if not is_loopback(host) and token is None and not no_auth:
        raise click.UsageError(
            f"--host {host} is reachable from other machines: set {TOKEN_ENV} (HTTP basic "
            "auth, any user name, the token as password) or pass --no-auth"
        )
    try:
        import uvicorn

        from cyclone_flow.ui import create_app
    except ImportError as exc:
        click.echo(
            f"error: the dashboard needs the ui extra ({exc.name} is missing): "
            "pip install 'cyclone-flow[ui]'",
            err=True,
        )
        raise SystemExit(1) from None
    if no_auth and token is None and not is_loopback(host):
        click.echo(
            f"warning: --no-auth: anyone who reaches {host}:{port} can see and "
            + ("read every run" if read_only else "cancel, retry and signal runs"),
            err=True,
        )
    setup_logging()
    url = resolve_database(database_url)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        app = create_app(client, read_only=read_only, auth_token=token)
        shown = f"[{host}]" if ":" in host else host
        address = f"http://{shown}:{port}/"
        click.echo(
            f"cyclone-flow: dashboard on {address}" + (" (read-only)" if read_only else ""),
            err=True,
        )
        if open_browser:
            threading.Timer(0.5, webbrowser.open, (address,)).start()
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)

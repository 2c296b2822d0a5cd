"""``cyclone-flow ui``: serve the web dashboard (:mod:`cyclone_flow.ui`, the ``ui`` extra,
imported only here and only when the command runs, so the core install works without it).

It binds 127.0.0.1 by default; any other host needs ``CYCLONE_UI_TOKEN`` (HTTP basic
auth: any user name, the token as password) or ``--no-auth``, which prints a warning.
Without a token only the ``Host`` values of the bound address (and ``--trusted-host``) are
answered (DNS rebinding). SIGTERM stops it as Ctrl-C does: exit 0, the embedded Postgres
left as every command leaves it; while it is still starting too (no traceback, no
"Aborted!")."""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import sys
import threading
import webbrowser
from types import FrameType

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
TRUSTED_HOSTS_ENV = "CYCLONE_UI_TRUSTED_HOSTS"
"""The environment variable of ``--trusted-host`` values (separated by commas or spaces)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT from now on until the server takes them over, or
    already set when one came while the process was starting (caught by the console
    script's entry point, ``_cyclone_flow_boot``, before the package's imports): a stop
    while starting exits 0 quietly, as a stop while serving does."""
    stopping = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    boot = sys.modules.get("_cyclone_flow_boot")
    if boot is not None and getattr(boot, "EARLY_SIGNALS", None):
        stopping.set()
    return stopping


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="TCP port."
)
@click.option("--read-only", is_flag=True, help="No actions: every POST is answered 405.")
@click.option("--open", "open_browser", is_flag=True, help="Open the dashboard in a browser.")
@click.option(
    "--trusted-host",
    "trusted_host",
    multiple=True,
    metavar="HOST",
    help="A Host header to answer besides the bound address's (a reverse proxy's name): "
    f"name, name:port, *.domain, or * (any; needs {TOKEN_ENV}). Repeatable; "
    f"env {TRUSTED_HOSTS_ENV} (comma-separated). With {TOKEN_ENV} and none given, any host.",
)
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
    trusted_host: tuple[str, ...],
    no_auth: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """Serve the web dashboard: runs, their live DAG, why a step waits, and actions
    (cancel, retry, signal, schedules) unless --read-only."""
    stopping = _stop_on_signals()
    token = os.environ.get(TOKEN_ENV) or None
    if not is_loopback(host) and token is None and not no_auth:
        raise click.UsageError(
            f"--host {host} is reachable from other machines: set {TOKEN_ENV} (HTTP basic "
            "auth, any user name, the token as password) or pass --no-auth"
        )
    given = list(trusted_host) or re.split(r"[,\s]+", os.environ.get(TRUSTED_HOSTS_ENV, ""))
    given = [g for g in given if g.strip()]
    try:
        import uvicorn

        from cyclone_flow.ui import create_app
        from cyclone_flow.ui.guards import bound_hosts, check_host_pattern
    except ImportError as exc:
        click.echo(
            f"error: the dashboard needs the ui extra ({exc.name} is missing): "
            "pip install 'cyclone-flow[ui]'",
            err=True,
        )
        raise SystemExit(1) from None
    try:
        patterns = [check_host_pattern(g) for g in given]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--trusted-host") from None
    if "*" in patterns and token is None:
        raise click.UsageError(
            f"--trusted-host '*' answers any Host header: it needs {TOKEN_ENV} "
            "(without a token a page that rebinds its name to this address could act)"
        )
    hosts = bound_hosts(host, port) + patterns if patterns or token is None else None
    if no_auth and token is None and not is_loopback(host):
        click.echo(
            f"warning: --no-auth: anyone who reaches {host}:{port} can see and "
            + ("read every run" if read_only else "cancel, retry and signal runs"),
            err=True,
        )
        if not patterns:
            click.echo(
                f"warning: without {TOKEN_ENV} only the Host {host}:{port} and the "
                "loopback names are answered: give the names the dashboard is reached by "
                "with --trusted-host",
                err=True,
            )
    setup_logging()
    if stopping.is_set():
        return  # stopped while starting: as a stop while serving, exit 0
    url = resolve_database(database_url)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        if stopping.is_set():
            return
        app = create_app(client, read_only=read_only, auth_token=token, trusted_hosts=hosts)
        shown = f"[{host}]" if ":" in host else host
        address = f"http://{shown}:{port}/"
        click.echo(
            f"cyclone-flow: dashboard on {address}" + (" (read-only)" if read_only else ""),
            err=True,
        )
        if open_browser:
            threading.Timer(0.5, webbrowser.open, (address,)).start()
        server = uvicorn.Server(
            uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
        )

        def stop(signum: int, frame: FrameType | None) -> None:
            server.should_exit = True

        # uvicorn shuts down on SIGTERM/SIGINT, then raises the signal again with the
        # handler it found: this one, so the command returns (exit 0) and the embedded
        # Postgres's exit hook deregisters this process (SIGTERM's default would kill it
        # first; SIGINT's would print "Aborted!")
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if not stopping.is_set():  # a signal just before this handler took over
                server.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

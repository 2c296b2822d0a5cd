"""``cyclone-flow worker``: claim and execute steps until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, NamedTuple

import click
import psycopg

from cyclone_flow.cli.common import (
    add_import_paths,
    database_options,
    duration_option,
    handle_errors,
    migrate_command,
    parse_age,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.cli.output import HandlerOutput
from cyclone_flow.cli.processes import child_command, run_processes, supervisor_pid
from cyclone_flow.cli.reload import supervise, watch_set
from cyclone_flow.client import Client, check_schema
from cyclone_flow.config import MAX_LEASE_TTL_S, RetentionConfig
from cyclone_flow.errors import ConfigError, SchemaOutdatedError
from cyclone_flow.handlers import AllowList
from cyclone_flow.names import DEFAULT_QUEUE, validate_queue_name

if TYPE_CHECKING:
    from cyclone_flow.metrics import Metrics, MetricsServer


class MetricsEndpoint(NamedTuple):
    """A worker's Prometheus metrics and the HTTP server that serves them
    (``--metrics-port``)."""

    metrics: Metrics
    server: MetricsServer


def _duration(value: str, option: str) -> float:
    return duration_option(value, option, max_s=MAX_LEASE_TTL_S)


def _parse_queues(values: tuple[str, ...], workers: int) -> dict[str, int]:
    """``--queue NAME[=N]`` options as ``worker_queues``; none: ``{"default": workers}``."""
    if not values:
        return {DEFAULT_QUEUE: workers}
    out: dict[str, int] = {}
    for value in values:
        name, sep, count = value.partition("=")
        try:
            validate_queue_name(name)
        except ConfigError as exc:
            raise click.BadParameter(f"{value!r}: {exc}", param_hint="--queue") from None
        try:
            n = int(count) if sep else workers
        except ValueError:
            n = 0  # not a whole number: the message below names what is wanted
        if n < 1:
            raise click.BadParameter(
                f"{value!r}: the worker count after '=' must be a whole number >= 1",
                param_hint="--queue",
            )
        out[name] = n
    return out


def _allow_list(allow_module: tuple[str, ...]) -> AllowList:
    prefixes = [p for item in allow_module for p in item.split(",") if p.strip()]
    return AllowList(prefixes=prefixes)


def _check_import_paths(paths: tuple[str, ...]) -> None:
    """Refuse (a usage error, exit 2) an ``--import-path`` that is not a folder: a typo
    would leave every handler unimportable (and ``--reload`` could not watch it)."""
    for path in paths:
        if not os.path.isdir(path):
            what = "is not a folder" if os.path.exists(path) else "does not exist"
            raise click.BadParameter(f"{path!r} {what}", param_hint="--import-path")


_STOP_MARGIN_S = 15.0
"""Seconds a supervisor waits for a worker child past its --shutdown-timeout (the
release of its leases and its row, each up to 5 s for a pool connection), then SIGKILL."""


@click.command("worker")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Worker threads (per process) on the default queue, or the default N of --queue.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes on this host, each with its own threads, pool and client id; "
    "above 1 a supervisor runs them, forwards SIGTERM/SIGINT and restarts crashed ones.",
)
@click.option("--lease-ttl", default="30s", show_default=True, help="Lease TTL, e.g. 30s.")
@click.option(
    "--max-reclaims",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Reclaims after which an expired lease discards the step (0: unbounded).",
)
@click.option(
    "--allow-module",
    multiple=True,
    envvar="CYCLONE_ALLOW_MODULES",
    help="Module prefix handlers may be imported from (repeatable; env "
    "CYCLONE_ALLOW_MODULES, comma-separated).",
)
@click.option(
    "--import-path",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Folder to put on sys.path (repeatable).",
)
@click.option(
    "--queue",
    "queues",
    multiple=True,
    metavar="NAME[=N]",
    help="Serve queue NAME with N workers (repeatable; N defaults to --workers). Without "
    "it the worker serves the default queue with --workers workers.",
)
@click.option(
    "--shutdown-timeout",
    default="10s",
    show_default=True,
    help="On SIGTERM/SIGINT, how long running handlers may finish before their leases "
    "are released for other workers.",
)
@click.option(
    "--exit-when-idle",
    is_flag=True,
    help="Exit once no step of the served queues is available or running, but those "
    "of calls this worker gave back (it cannot import them, or may not run them).",
)
@click.option(
    "--tx-slots",
    type=click.IntRange(min=1),
    default=None,
    help="Cap on completion transactions open at once (default: the total worker count); "
    "the pool is tx_slots + 6 connections.",
)
@click.option("--client-id", default=None, help="Lease owner name (default: host/pid/random).")
@click.option(
    "--poll-interval",
    default="100ms,1s",
    show_default=True,
    metavar="MIN,MAX",
    help="Claim polling floor: poll at MIN, back off to MAX while idle.",
)
@click.option(
    "--notify/--no-notify",
    default=True,
    show_default=True,
    help="LISTEN for wakeups; --no-notify polls only (PgBouncer in transaction mode).",
)
@click.option(
    "--retention",
    default=None,
    metavar="DURATION",
    help="Also purge completed, failed and cancelled runs older than this (e.g. 30d).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics on http://ADDR:PORT/metrics (0: any free port).",
)
@click.option(
    "--metrics-addr",
    default="0.0.0.0",
    show_default=True,
    help="Address the metrics endpoint listens on.",
)
@click.option(
    "--reload",
    is_flag=True,
    help="Restart the worker (gracefully) whenever a .py file of an --allow-module "
    "package or under an --import-path changes: handlers are imported afresh.",
)
@database_options
@handle_errors
def worker_cmd(
    workers: int,
    processes: int,
    lease_ttl: str,
    max_reclaims: int,
    allow_module: tuple[str, ...],
    import_path: tuple[str, ...],
    queues: tuple[str, ...],
    shutdown_timeout: str,
    exit_when_idle: bool,
    tx_slots: int | None,
    client_id: str | None,
    poll_interval: str,
    notify: bool,
    retention: str | None,
    metrics_port: int | None,
    metrics_addr: str,
    reload: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """Claim and execute steps until SIGTERM/SIGINT (graceful: exits 0).

    With --processes N (N > 1): run N such worker processes under a supervisor that
    forwards SIGTERM/SIGINT to them and restarts a crashed one with backoff."""
    stop = _stop_on_signals()  # first: a worker stopped while starting exits 0 too
    setup_logging(logging.INFO)
    ttl = _duration(lease_ttl, "--lease-ttl")
    grace = _duration(shutdown_timeout, "--shutdown-timeout")
    allow = _allow_list(allow_module)
    if not allow.prefixes:
        raise click.UsageError(
            "give at least one --allow-module PREFIX (or CYCLONE_ALLOW_MODULES): a worker "
            "imports handlers only from the modules it is allowed"
        )
    _check_import_paths(import_path)
    worker_queues = _parse_queues(queues, workers)
    if metrics_port and metrics_port + processes - 1 > 65535:
        raise click.BadParameter(
            f"{processes} processes serve metrics on ports {metrics_port} to "
            f"{metrics_port + processes - 1}, past 65535",
            param_hint="--metrics-port",
        )
    if reload:  # a supervisor: the worker runs (and restarts) in a child process
        command = child_command(sys.orig_argv)
        # a --processes child is a supervisor itself: give it time to wait for its own
        margin = _STOP_MARGIN_S + (5.0 if processes > 1 else 0.0)
        watched = watch_set(allow.prefixes, import_path, os.getcwd())
        sys.exit(supervise(command, watched, grace + margin))
    if processes > 1:
        code = _supervise_processes(
            processes, grace, client_id, metrics_port, database_url, schema, stop
        )
        sys.exit(code)
    supervisor = supervisor_pid()  # set in a --processes child: stop when it is gone
    add_import_paths(import_path)
    url = resolve_database(database_url, quiet=supervisor is not None)  # the supervisor said it
    options: dict[str, Any] = {
        "poll_interval": _poll_interval(poll_interval),
        "notify": notify,
    }
    if tx_slots is not None:
        options["tx_slots"] = tx_slots
    if client_id is not None:
        options["client_id"] = client_id
    if retention is not None:
        options["retention"] = RetentionConfig(default_age=parse_age(retention, "--retention"))
    if stop.is_set():  # stopped while starting: nothing to open, nothing to hand back
        sys.exit(0)
    endpoint = _start_metrics(metrics_port, metrics_addr)
    try:
        client = Client(
            url,
            schema=schema,
            worker_queues=worker_queues,
            lease_ttl=ttl,
            max_reclaims=max_reclaims,
            allow_modules=allow,
            prepare=prepare_enabled(),
            **options,
        )
    except SchemaOutdatedError as exc:
        raise _not_migrated(exc, database_url) from None
    if endpoint is not None:
        endpoint.metrics.watch_queues(client, worker_queues, client.config.logger)
        endpoint.metrics.watch_health(client, client.config.logger)
        client.observe_steps(endpoint.metrics.observe)
        client.observe_database_errors(endpoint.metrics.observe_database_error)
    if stop.is_set():  # stopped while starting: nothing claimed, nothing to hand back
        client.shutdown(timeout=grace)
        if endpoint is not None:
            endpoint.server.close()
        sys.exit(0)
    output = HandlerOutput.start()  # a handler's child processes write to its step logs
    client.start()
    logging.getLogger("cyclone_flow").info(
        "worker %s started: queues %s, allowed modules %s",
        client.config.client_id,
        ", ".join(f"{q}={n}" for q, n in client.config.worker_queues.items()),
        allow.describe(),
    )
    served = list(client.config.worker_queues)
    idle_check = max(client.config.poll_interval[1], 0.2)
    try:
        while not stop.wait(idle_check):
            if exit_when_idle and client.in_flight() == 0 and _idle(client, served):
                break
            if supervisor is not None and os.getppid() != supervisor:
                logging.getLogger("cyclone_flow").warning(
                    "the supervisor (pid %d) is gone: shutting down", supervisor
                )
                break
    finally:
        client.shutdown(timeout=grace)
        output.close()
        if endpoint is not None:
            endpoint.server.close()
    sys.exit(0)


def _idle(client: Client, served: list[str]) -> bool:
    """Whether nothing of the ``served`` queues is left that this worker can run: no step
    available or running but the available ones of the calls it gives back (it cannot
    import them, or may not run them); those are logged, once, when it exits."""
    count, failed = client.count_active_other_calls(served)
    if count:
        return False
    log = logging.getLogger("cyclone_flow")
    for call, reason in sorted(failed.items()):
        log.warning("idle: leaving the steps of %s to other workers: %s", call, reason)
    return True


def _not_migrated(exc: SchemaOutdatedError, database_url: str | None) -> SchemaOutdatedError:
    """``exc`` as the worker reports it: the migrate command with this worker's database
    options, and exit code 2 (the worker cannot start until the schema is migrated: a
    restart would fail the same way, so a ``--processes`` supervisor does not restart)."""
    command = migrate_command(database_url, exc.schema)
    out = SchemaOutdatedError(exc.schema, exc.found, exc.needed, exc.missing, command=command)
    out.args = (f"{out}; the worker did not start",)
    out.exit_code = 2
    return out


def _supervise_processes(
    processes: int,
    grace: float,
    client_id: str | None,
    metrics_port: int | None,
    database_url: str | None,
    schema: str,
    stop: threading.Event,
) -> int:
    """Run ``processes`` copies of this command line (``--processes 1`` appended) under
    :func:`~cyclone_flow.cli.processes.run_processes`; child *i* gets ``--client-id ID-i``
    and ``--metrics-port PORT+i-1`` when those were given. The supervisor says which
    database is used (its children do not) and, on one short connection, checks that the
    schema is migrated: raises SchemaOutdatedError (exit 2) and starts no child when it
    is not (an unreachable database is left to the children, restarted with backoff until
    it answers). Without a database URL the supervisor starts (or joins) the embedded
    Postgres once and hands its URL to the children in ``CYCLONE_DATABASE_URL``. Returns
    the supervisor's exit code."""
    env = dict(os.environ)
    url = resolve_database(database_url)
    if database_url is None:
        env["CYCLONE_DATABASE_URL"] = url
    try:
        check_schema(url, schema=schema, prepare=prepare_enabled())
    except SchemaOutdatedError as exc:
        raise _not_migrated(exc, database_url) from None
    except psycopg.OperationalError:
        pass  # each child says so, and is restarted with backoff until the database answers
    base = [*child_command(sys.orig_argv), "--processes", "1"]
    commands = []
    for i in range(1, processes + 1):
        command = list(base)
        if client_id is not None:
            command += ["--client-id", f"{client_id}-{i}"]
        if metrics_port:
            command += ["--metrics-port", str(metrics_port + i - 1)]
        commands.append(command)
    return run_processes(commands, grace + _STOP_MARGIN_S, stop=stop, env=env)


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT from now on, or already set when one came while
    the process was starting (caught by the console script's entry point,
    ``_cyclone_flow_boot``, before the package's imports)."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        logging.getLogger("cyclone_flow").info("%s: shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    boot = sys.modules.get("_cyclone_flow_boot")
    if boot is not None and getattr(boot, "EARLY_SIGNALS", None):
        stop.set()
    return stop


def _poll_interval(value: str) -> tuple[float, float]:
    """``MIN,MAX`` (or one duration for both) as seconds."""
    parts = [p.strip() for p in value.split(",")]
    if len(parts) not in (1, 2):
        raise click.BadParameter("use MIN,MAX, e.g. 100ms,1s", param_hint="--poll-interval")
    lo = _duration(parts[0], "--poll-interval")
    hi = _duration(parts[-1], "--poll-interval")
    return lo, hi


def _start_metrics(port: int | None, addr: str) -> MetricsEndpoint | None:
    """The metrics endpoint serving on ``addr:port``, or None without a port."""
    if port is None:
        return None
    from cyclone_flow.metrics import Metrics, serve_metrics  # prometheus_client only here

    metrics = Metrics()
    try:
        server = serve_metrics(metrics, port, addr)
    except OSError as exc:
        raise click.ClickException(f"cannot serve metrics on {addr}:{port}: {exc}") from None
    logging.getLogger("cyclone_flow").info("metrics on http://%s:%d/metrics", addr, server.port)
    return MetricsEndpoint(metrics, server)

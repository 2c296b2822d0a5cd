"""``cyclone-flow doctor``: the health advisor (:meth:`cyclone_flow.Client.health`) on the
command line: how Postgres keeps the engine's tables, and what to do about it. Exit 0
healthy, 1 with warnings, 2 when it cannot check (a bad option, no database to reach);
with ``--json`` stdout always holds one JSON document (``{"healthy": null, "error"}``
when it cannot check)."""

from __future__ import annotations

from typing import NoReturn

import click
import psycopg
import psycopg_pool
from rich.text import Text

from cyclone_flow.advisor import HealthReport, Thresholds
from cyclone_flow.cli.common import (
    MAX_AGE_S,
    database_options,
    duration_option,
    echo_json,
    missing_embedded_notice,
    out_console,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.client import Client
from cyclone_flow.durations import format_span
from cyclone_flow.errors import CycloneError

EXIT_HEALTHY = 0
EXIT_WARNINGS = 1
EXIT_CANNOT_CHECK = 2


def _error_document(message: str) -> None:
    """The ``--json`` document of a doctor that could not check: ``healthy`` null."""
    echo_json({"healthy": None, "error": message})


def _usage_document(exc: click.UsageError) -> None:
    """The error document of a usage mistake, its message as stderr shows it (``invalid
    value for '--xact-age': ...``)."""
    message = exc.format_message()
    if message[:1].isupper() and message[1:2].islower():
        message = message[0].lower() + message[1:]
    _error_document(message)


class _DoctorCommand(click.Command):
    """``doctor``'s command: with ``--json``, a mistake click finds while parsing the
    options (a bad value, an unknown option) also prints the error document on stdout;
    click then reports it on stderr and exits 2 as for any command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        as_json = "--json" in args[: args.index("--")] if "--" in args else "--json" in args
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            if as_json:
                _usage_document(exc)
            raise


@click.command("doctor", cls=_DoctorCommand)
@click.option("--json", "as_json", is_flag=True, help="The whole report as JSON.")
@click.option(
    "--xact-age",
    default="5m",
    show_default=True,
    help="Warn about transactions open longer than this (e.g. 30s, 5m).",
)
@click.option(
    "--backlog-age",
    default="5m",
    show_default=True,
    help="Warn about queues whose oldest claimable step waited longer than this.",
)
@click.option(
    "--min-dead",
    type=click.IntRange(min=0),
    default=Thresholds.min_dead,
    show_default=True,
    help="Dead tuples below which a table is never called bloated.",
)
@click.option(
    "--dead-ratio",
    type=click.FloatRange(min=0.0, max=1.0),
    default=Thresholds.dead_ratio,
    show_default=True,
    help="Warn when dead tuples are this share of a table's rows.",
)
@click.option(
    "--reclaims",
    type=click.IntRange(min=0),
    default=Thresholds.reclaims,
    show_default=True,
    help="Warn about unfinished steps reclaimed more often than this.",
)
@database_options
def doctor_cmd(
    as_json: bool,
    xact_age: str,
    backlog_age: str,
    min_dead: int,
    dead_ratio: float,
    reclaims: int,
    database_url: str | None,
    schema: str,
) -> None:
    """Check the health of the engine's tables and what holds them back: dead tuples and
    autovacuum of cyclone_steps / cyclone_runs, transactions and replication slots that
    hold the xmin horizon, the claim index and the claim's cost, backlog ages, reclaimed
    steps, held sequences, leases of dead workers, the schema version and the connection
    budget. Each warning names its fix. Exit 0 when healthy, 1 with warnings, 2 when it
    cannot check (a bad option, an unreachable database); with --json, an error document
    ({"healthy": null, "error": ...}) then."""
    try:
        thresholds = Thresholds(
            xact_age_s=duration_option(xact_age, "--xact-age", max_s=MAX_AGE_S),
            backlog_age_s=duration_option(backlog_age, "--backlog-age", max_s=MAX_AGE_S),
            min_dead=min_dead,
            dead_ratio=dead_ratio,
            reclaims=reclaims,
        )
    except click.UsageError as exc:
        if as_json:
            _usage_document(exc)
        raise
    setup_logging()
    report = _check(thresholds, database_url, schema, as_json)
    if as_json:
        echo_json(report.to_json())
    else:
        _print(report)
    raise SystemExit(EXIT_HEALTHY if report.healthy else EXIT_WARNINGS)


def _check(
    thresholds: Thresholds, database_url: str | None, schema: str, as_json: bool
) -> HealthReport:
    """The health report of ``schema``; exit 2 (:func:`_cannot_check`) when there is no
    database to check: no embedded one here, or one that cannot be reached or read."""
    if database_url is None:
        from cyclone_flow.embedded import cyclone_home, embedded_exists

        home = cyclone_home()
        if not embedded_exists(home):
            _cannot_check(missing_embedded_notice(home).removeprefix("error: "), as_json)
    try:
        url = resolve_database(database_url, existing=True)
        with Client(url, schema=schema, prepare=prepare_enabled(), check_schema=False) as client:
            return client.health(thresholds)
    except CycloneError as exc:
        _cannot_check(str(exc), as_json)
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        _cannot_check(f"cannot use the database: {first}", as_json)


def _cannot_check(message: str, as_json: bool) -> NoReturn:
    """Say on stderr why the doctor could not check (and with ``as_json`` in the error
    document on stdout); exit 2."""
    click.echo(f"error: {message}", err=True)
    if as_json:
        _error_document(message)
    raise SystemExit(EXIT_CANNOT_CHECK)


def _print(report: HealthReport) -> None:
    console = out_console()
    for table in report.tables:
        rows = table.live + table.dead
        share = f" ({100 * table.dead / rows:.0f}%)" if rows else ""
        last = table.last_autovacuum or table.last_vacuum
        console.print(
            Text(
                f"{table.table_name}: {table.live} live, {table.dead} dead{share}; autovacuum "
                f"{'on' if table.autovacuum_enabled else 'OFF'}, last vacuum "
                f"{last.isoformat(timespec='seconds') if last else 'never'}"
            )
        )
    console.print(Text(f"oldest transaction holding the xmin horizon: {_oldest(report)}"))
    if report.claim_index is not None:
        console.print(
            Text(
                f"claim index: {report.claim_index.bytes // 1024} KiB, bloat estimate "
                f"{report.claim_index_bloat:.1f}x"
            )
        )
    for c in report.claims:
        console.print(
            Text(
                f"claim of queue {c.queue}: cost {c.cost:.1f}, claim index used: "
                f"{c.index_text(report.thresholds)}; {c.buffers} buffers, {c.time_ms:.2f} ms "
                f"for {c.rows} rows"
            )
        )
    for q in report.queues:
        console.print(
            Text(
                f"queue {q.queue}: {q.available} claimable, oldest waited "
                f"{format_span(q.oldest_available_s)}"
            )
        )
    conn = report.connections
    console.print(
        Text(
            f"schema {report.schema}: migration {report.schema_version} (code "
            f"{report.code_version}); connections {conn.in_use} of "
            f"{conn.max_connections - conn.reserved}, {conn.live_workers} live "
            f"{'worker' if conn.live_workers == 1 else 'workers'}"
        )
    )
    if report.healthy:
        console.print(Text("healthy: no warnings", style="green"))
        return
    for advice in report.advice:
        console.print(Text(f"warning [{advice.check}] {advice.message}", style="yellow"))
        console.print(Text(f"  fix: {advice.fix}"))


def _oldest(report: HealthReport) -> str:
    """The oldest transaction holding the xmin horizon, however young (a warning names it
    only past ``--xact-age``): ``4.2s (pid 123, application APP, idle in transaction,
    query started 2026-01-02T10:00:00+00:00)``; ``none``."""
    x = report.oldest_xmin_holder
    if x is None:
        holding = [t for t in report.transactions if t.holds_xmin]
        if not holding:
            return "none"
        x = holding[0]
    started = x.query_start.isoformat(timespec="seconds") if x.query_start else "never"
    return (
        f"{format_span(x.age_s)} (pid {x.pid}, application "
        f"{x.application_name or '(no application_name)'}, {x.state or 'active'}, "
        f"query started {started})"
    )

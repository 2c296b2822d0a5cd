"""``cyclone-flow doctor``: the health advisor (:meth:`cyclone_flow.Client.health`) on the
command line: how Postgres keeps the engine's tables, and what to do about it."""

from __future__ import annotations

import click
from rich.text import Text

from cyclone_flow.advisor import HealthReport, Thresholds
from cyclone_flow.cli.common import (
    MAX_AGE_S,
    database_options,
    duration_option,
    echo_json,
    handle_errors,
    out_console,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.client import Client
from cyclone_flow.durations import format_elapsed

EXIT_HEALTHY = 0
EXIT_WARNINGS = 1


@click.command("doctor")
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
@handle_errors
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
    budget. Each warning names its fix. Exit 0 when healthy, 1 with warnings."""
    thresholds = Thresholds(
        xact_age_s=duration_option(xact_age, "--xact-age", max_s=MAX_AGE_S),
        backlog_age_s=duration_option(backlog_age, "--backlog-age", max_s=MAX_AGE_S),
        min_dead=min_dead,
        dead_ratio=dead_ratio,
        reclaims=reclaims,
    )
    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled(), check_schema=False) as client:
        report = client.health(thresholds)
    if as_json:
        echo_json(report.to_json())
    else:
        _print(report)
    raise SystemExit(EXIT_HEALTHY if report.healthy else EXIT_WARNINGS)


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
    holding = [t for t in report.transactions if t.holds_xmin]
    oldest = f"{format_elapsed(holding[0].age_s)} (pid {holding[0].pid})" if holding else "none"
    console.print(Text(f"oldest transaction holding the xmin horizon: {oldest}"))
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
                f"{format_elapsed(q.oldest_available_s)}"
            )
        )
    conn = report.connections
    console.print(
        Text(
            f"schema {report.schema}: migration {report.schema_version} (code "
            f"{report.code_version}); connections {conn.in_use} of "
            f"{conn.max_connections - conn.reserved}, {conn.live_workers} live workers"
        )
    )
    if report.healthy:
        console.print(Text("healthy: no warnings", style="green"))
        return
    for advice in report.advice:
        console.print(Text(f"warning [{advice.check}] {advice.message}", style="yellow"))
        console.print(Text(f"  fix: {advice.fix}"))

"""The misconfigured PgBouncer path: a ``cyclone-flow worker`` WITH prepared
statements on, through PgBouncer 1.18 in transaction mode. Its engine statements then
meet ``prepared statement "_pg3_N" does not exist`` / ``already exists`` (in a 200-run
measurement: about 1,700 of them); none is charged to a handler: every run completes and
no step has a failed attempt (before: 14 of 200 runs failed), the steps they hit are left
to their lease, and the worker logs once the warning that names the fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.pgbouncer import PgBouncer, transaction_pooler
from helpers.procs import WorkerProcess, wait_until

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text

RUNS = 60
HINT = "--no-prepare or CYCLONE_PREPARE=0"

FLOW = """\
name: prepared_through_pgbouncer
nodes:
  first:
    call: cyclone_test_handlers.basic:echo
  second:
    call: cyclone_test_handlers.basic:echo
    needs: [first]
    input: "${{ nodes.first.output }}"
"""


@pytest.fixture
def pgbouncer(database_url: str, schema: str) -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode, fewer server connections than the worker's."""
    with transaction_pooler(database_url) as bouncer:
        yield bouncer


def _count(db: Any, sql: str) -> int:
    row = db.execute(sql).fetchone()
    return int(row[0])


def test_prepared_statement_errors_through_pgbouncer_charge_no_attempt(
    pgbouncer: PgBouncer, db: Any, schema: str, tmp_path: Path
) -> None:
    worker = WorkerProcess(
        pgbouncer.url,
        schema,
        tmp_path / "worker.log",
        workers=4,
        lease_ttl="2s",  # a step left to its lease comes back within a few seconds
        extra_args=["--no-notify", "--poll-interval", "20ms,100ms"],
    )
    submitter = Client(pgbouncer.url, schema=schema, prepare=False, notify=False)
    try:
        for i in range(RUNS):
            submitter.submit(load_flow_text(FLOW), {"n": i})
        wait_until(
            lambda: (
                _count(db, "SELECT count(*) FROM cyclone_runs WHERE state <> 'running'") == RUNS
            ),
            timeout=240,
            interval=0.2,
            what=f"{RUNS} runs to finish through pgbouncer",
        )
        states = db.execute("SELECT state, count(*) FROM cyclone_runs GROUP BY state").fetchall()
        assert dict(states) == {"completed": RUNS}, worker.log()
        failed = _count(db, "SELECT count(*) FROM cyclone_steps WHERE errors <> '[]'::jsonb")
        assert failed == 0, worker.log()
    finally:
        submitter.shutdown()
        assert worker.terminate(timeout=30) == 0, worker.log()
    log = worker.log()
    met = log.count("prepared statement")
    print(f"prepared-statement errors met by the worker: {met}")
    if met:  # the pooler's pairing decides whether any came up
        assert log.count(HINT) == 1, log
    # no assertion on tracebacks: with prepare on, the pooler can also run a statement as
    # another one prepared under the same name on that server connection, whose rows the
    # typed rows refuse (TypeError "no column for ..."): an anomaly logged with its
    # traceback, and still no attempt charged (asserted above); only --no-prepare avoids it

"""The documented PgBouncer path end to end (docs/deployment.md, "PgBouncer"): a real
PgBouncer 1.18+ in transaction mode in front of the test's Postgres, with fewer server
connections than clients so that consecutive transactions of one client land on
different server connections. A ``cyclone-flow worker --no-notify --no-prepare`` process
runs 200 two-step runs submitted through it with prepared statements off: every run
completes, no attempt fails (none with ``prepared statement "_pg3_N" does not exist`` /
``bind message supplies 4 parameters``: the CLI can turn prepared statements off)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.pgbouncer import PgBouncer, transaction_pooler
from helpers.procs import WorkerProcess, wait_until

from cyclone_flow import Client, load_flow
from cyclone_flow.flowfile import load_flow_text

RUNS = 200

FLOW = """\
name: through_pgbouncer
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
    """PgBouncer in transaction mode in front of the session's Postgres (stopped before
    the test's schema goes back to the pool, so no server connection outlives it)."""
    with transaction_pooler(database_url) as bouncer:
        yield bouncer


def test_200_runs_through_pgbouncer_in_transaction_mode(
    pgbouncer: PgBouncer, db: Any, schema: str, tmp_path: Path
) -> None:
    version = pgbouncer.version()
    print(version)
    major, minor = (int(x) for x in version.split()[1].split(".")[:2])
    assert (major, minor) >= (1, 18), version
    flow = load_flow_text(FLOW)
    worker = WorkerProcess(
        pgbouncer.url,
        schema,
        tmp_path / "worker.log",
        workers=4,
        lease_ttl="30s",
        extra_args=["--no-notify", "--no-prepare", "--poll-interval", "20ms,100ms"],
    )
    submitter = Client(pgbouncer.url, schema=schema, prepare=False, notify=False)
    try:
        run_ids = [submitter.submit(flow, {"n": i}) for i in range(RUNS)]
        done = wait_until(
            lambda: (
                n
                if (n := _count(db, "SELECT count(*) FROM cyclone_runs WHERE state <> 'running'"))
                == RUNS
                else 0
            ),
            timeout=240,
            interval=0.2,
            what=f"{RUNS} runs to finish through pgbouncer",
        )
        assert done == RUNS
        states = db.execute("SELECT state, count(*) FROM cyclone_runs GROUP BY state").fetchall()
        assert dict(states) == {"completed": RUNS}, worker.log()
        failed = _count(db, "SELECT count(*) FROM cyclone_steps WHERE errors <> '[]'::jsonb")
        assert failed == 0, worker.log()
        assert submitter.get_run(run_ids[-1]).output == {"second": {"n": RUNS - 1}}
        assert submitter.wait(run_ids[0], timeout=10).state == "completed"  # polls: no LISTEN
        assert submitter.listener is None
    finally:
        submitter.shutdown()
        assert worker.terminate(timeout=30) == 0, worker.log()
    log = worker.log()
    assert "prepared statement" not in log, log
    assert "Traceback" not in log, log


def _count(db: Any, sql: str) -> int:
    row = db.execute(sql).fetchone()
    return int(row[0])


def test_the_cli_talks_through_pgbouncer_with_no_prepare_from_the_environment(
    pgbouncer: PgBouncer, schema: str, tmp_path: Path
) -> None:
    """``CYCLONE_PREPARE=0`` is ``--no-prepare``; ``submit --wait --no-notify`` polls."""
    from helpers.cli import clean_env, no_traceback, run_cli
    from helpers.paths import EXAMPLES, FLOWS

    flow = FLOWS / "hello.yaml"
    assert load_flow(flow)  # the example the README starts with
    env = clean_env(CYCLONE_PREPARE="0", CYCLONE_DATABASE_URL=pgbouncer.url)
    worker = WorkerProcess(
        pgbouncer.url,
        schema,
        tmp_path / "worker.log",
        allow=("cyclone_examples",),
        env={"CYCLONE_PREPARE": "0"},
        extra_args=["--no-notify", "--import-path", str(EXAMPLES)],
    )
    try:
        for _ in range(3):
            proc = run_cli(
                "submit", flow, "--wait", "--no-notify", "--timeout", "60s", "--schema", schema,
                "--input", '{"name": "Ada"}', env=env,
            )  # fmt: skip
            no_traceback(proc)
            assert proc.returncode == 0, proc.stderr
        status = run_cli("runs", "--schema", schema, env=env)
        assert status.returncode == 0, status.stderr
    finally:
        assert worker.terminate(timeout=30) == 0, worker.log()

"""Operations from the command line: ``purge`` and the worker's client options
(``--client-id``, ``--tx-slots``, ``--poll-interval``, ``--no-notify``, ``--retention``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import Runner, no_traceback
from helpers.procs import WorkerProcess, wait_until

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text

ECHO = load_flow_text("name: ops_echo\nnodes:\n  s: {call: 'cyclone_test_handlers.basic:echo'}\n")
PARKED = load_flow_text("name: ops_parked\nnodes:\n  s: {call: 'm:f', queue: parked}\n")


def _finished_runs(make_client: Callable[..., Client], db: Any, n: int, age_h: float) -> list[str]:
    client = make_client(workers=2, allow_modules=["cyclone_test_handlers"])
    client.start()
    run_ids = [client.submit(ECHO, {"i": i}) for i in range(n)]
    for run_id in run_ids:
        assert client.wait(run_id, timeout=20).state == "completed"
    client.shutdown()  # claims nothing more
    db.execute(
        "UPDATE cyclone_runs SET finished_at = finished_at - make_interval(hours => %s)"
        " WHERE id = ANY(%s::uuid[])",
        (age_h, run_ids),
    )
    return run_ids


def _count(db: Any) -> int:
    return int(db.execute("SELECT count(*) FROM cyclone_runs").fetchone()[0])


def test_purge_dry_run_then_purge(cli: Runner, make_client: Callable[..., Client], db: Any) -> None:
    _finished_runs(make_client, db, 3, age_h=48)
    running = make_client().submit(PARKED)
    dry = cli("purge", "--older-than", "1d", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout) == {
        "dry_run": True,
        "older_than_s": 86400.0,
        "runs": 3,
        "steps": 3,
    }
    assert _count(db) == 4
    assert cli("purge", "--older-than", "3d").stdout.strip() == "deleted 0 run(s)"
    done = cli("purge", "--older-than", "1d", "--batch-size", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "deleted 3 run(s)"
    remaining = db.execute("SELECT id::text FROM cyclone_runs").fetchall()
    assert remaining == [(running,)]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--older-than", "0s"], "must be positive"),
        (["--older-than", "7x"], "invalid duration"),
        ([], "error: missing option '--older-than'"),
        (["--older-than", "1d", "--batch-size", "0"], "--batch-size"),
    ],
)
def test_purge_usage_mistakes_exit_2(cli: Runner, args: list[str], needle: str) -> None:
    proc = cli("purge", *args)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    no_traceback(proc)


def test_worker_client_options_from_the_command_line(
    make_client: Callable[..., Client],
    db: Any,
    database_url: str,
    schema: str,
    tmp_path: Path,
) -> None:
    old = _finished_runs(make_client, db, 2, age_h=2)
    worker = WorkerProcess(
        database_url,
        schema,
        tmp_path / "worker.log",
        extra_args=[
            "--client-id",
            "worker-one",
            "--tx-slots",
            "1",
            "--poll-interval",
            "20ms,200ms",
            "--no-notify",
            "--retention",
            "1h",
        ],
    )
    try:
        wait_until(
            lambda: (
                not db.execute(
                    "SELECT 1 FROM cyclone_runs WHERE id = ANY(%s::uuid[])", (old,)
                ).fetchone()
            ),
            timeout=30,
            what="the worker's retention sweep to purge the old runs",
        )
        run_id = make_client().submit(ECHO, {"x": 1})
        wait_until(
            lambda: db.execute(
                "SELECT state = 'completed' FROM cyclone_runs WHERE id = %s", (run_id,)
            ).fetchone()[0],
            timeout=30,
            what="the worker to run the step by polling",
        )
        owner = db.execute(
            "SELECT lease_owner FROM cyclone_steps WHERE run_id = %s", (run_id,)
        ).fetchone()[0]
        assert owner == "worker-one"
        assert worker.terminate() == 0
        log = worker.log()
        assert "worker worker-one started" in log
        assert "retention: purged 2 run(s)" in log
        # structured step fields on the lines about a step
        assert f"run {run_id} completed run_id={run_id} node=s attempt=1" in log
    finally:
        worker.kill()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--poll-interval", "1s,100ms"], "poll_interval min"),
        (["--poll-interval", "a,b,c"], "MIN,MAX"),
        (["--retention", "-1d"], "--retention"),
        (["--tx-slots", "0"], "--tx-slots"),
    ],
)
def test_worker_option_mistakes_exit_2(cli: Runner, args: list[str], needle: str) -> None:
    proc = cli("worker", "--allow-module", "x", *args)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    no_traceback(proc)

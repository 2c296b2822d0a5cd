"""Isolated runs through the real CLI: with a ``cyclone-flow worker`` serving the
queue, the steps of a run submitted by ``cyclone-flow run`` (its fan-out items too) are
executed by that process only; after it is SIGKILLed, its run is released to the worker
and completes there; ``run --shared`` lets the worker take steps as before."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import psycopg
from helpers.cli import Runner, clean_env, json_output
from helpers.paths import CLI, TEST_HANDLERS
from helpers.procs import WorkerProcess, wait_until
from psycopg import sql

SLEEP = "cyclone_test_handlers.ops:short_sleep"


def _flow(tmp_path: Path, nodes: str) -> Path:
    path = tmp_path / "flow.yaml"
    path.write_text(f"name: isolated\nnodes:\n{nodes}", encoding="utf-8")
    return path


def _parallel_flow(tmp_path: Path) -> Path:
    marker = tmp_path / "m"
    body = "".join(
        f'  n{i}: {{call: "{SLEEP}", input: {{marker: "{marker}", seconds: 0.2}}}}\n'
        for i in range(6)
    )
    body += (
        "  each:\n    type: fan_out\n    needs: [n0]\n    over: [1, 2, 3, 4]\n"
        f'    call: "{SLEEP}"\n    input: {{marker: "{marker}", seconds: 0.2}}\n'
    )
    return _flow(tmp_path, body)


def _run(database_url: str, schema: str, flow: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(CLI),
            "run",
            str(flow),
            "--workers",
            "1",
            "--import-path",
            str(TEST_HANDLERS),
            "--database-url",
            database_url,
            "--schema",
            schema,
            *args,
        ],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _step_pids(database_url: str, schema: str) -> dict[str, Any]:
    """node -> the pid its handler returned, for the completed steps that ran a handler."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT node, (output->>'pid')::int FROM {}.cyclone_steps"
                " WHERE state = 'completed' AND type IN ('action', 'fan_out_item')"
            ).format(sql.Identifier(schema))
        ).fetchall()
    return dict(rows)


def _run_state(database_url: str, schema: str) -> str | None:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            sql.SQL("SELECT state FROM {}.cyclone_runs").format(sql.Identifier(schema))
        ).fetchone()
    return None if row is None else str(row[0])


def _live_worker(cli: Runner, proc: WorkerProcess) -> None:
    wait_until(
        lambda: any(
            w["pid"] == proc.pid and w["live"] for w in json_output(cli("workers", "--json").stdout)
        ),
        timeout=30,
        what="the worker's live heartbeat row",
    )


def _worker(database_url: str, schema: str, tmp_path: Path) -> WorkerProcess:
    return WorkerProcess(
        database_url,
        schema,
        tmp_path / "worker.log",
        workers=4,
        extra_args=["--poll-interval", "20ms,100ms"],
    )


def test_a_run_processes_every_step_itself_while_a_worker_serves_the_queue(
    cli: Runner, database_url: str, schema: str, tmp_path: Path
) -> None:
    worker = _worker(database_url, schema, tmp_path)
    try:
        _live_worker(cli, worker)
        run = _run(database_url, schema, _parallel_flow(tmp_path))
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        pids = _step_pids(database_url, schema)
        assert len(pids) == 10, pids  # n0..n5 and each[0..3]
        assert set(pids.values()) == {run.pid}, (pids, worker.pid)
    finally:
        assert worker.terminate() == 0, worker.log()


def test_run_shared_lets_the_worker_take_steps(
    cli: Runner, database_url: str, schema: str, tmp_path: Path
) -> None:
    worker = _worker(database_url, schema, tmp_path)
    try:
        _live_worker(cli, worker)
        run = _run(database_url, schema, _parallel_flow(tmp_path), "--shared")
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        pids = _step_pids(database_url, schema)
        assert worker.pid in pids.values(), (pids, run.pid)
    finally:
        assert worker.terminate() == 0, worker.log()


def test_after_the_run_process_is_killed_its_run_completes_on_the_worker(
    cli: Runner, database_url: str, schema: str, tmp_path: Path
) -> None:
    marker = tmp_path / "entered"
    flow = _flow(
        tmp_path,
        f'  first: {{call: "{SLEEP}", input: {{marker: "{tmp_path / "f"}", seconds: 0}}}}\n'
        "  second:\n    needs: [first]\n"
        '    call: "cyclone_test_handlers.ops:cooperative_once"\n'
        f'    input: {{marker: "{marker}", max_wait: 120}}\n',
    )
    worker = _worker(database_url, schema, tmp_path)
    try:
        _live_worker(cli, worker)
        run = _run(database_url, schema, flow, "--lease-ttl", "1s")
        try:
            wait_until(marker.exists, timeout=60, what="second running in the run process")
            assert marker.read_text(encoding="utf-8") == str(run.pid)
            os.kill(run.pid, signal.SIGKILL)
        finally:
            run.kill()
            run.communicate()
        wait_until(
            lambda: _run_state(database_url, schema) == "completed",
            timeout=60,
            what="the run completed by the worker",
        )
        pids = _step_pids(database_url, schema)
        assert pids == {"first": run.pid, "second": worker.pid}
    finally:
        assert worker.terminate() == 0, worker.log()

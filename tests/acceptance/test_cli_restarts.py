"""``submit --wait`` and ``cyclone-flow run`` (real CLI processes) ride out a Postgres
restart: a server of the test's own is restarted with ``pg_ctl restart -m fast`` while
they wait, every session it had is terminated (57P01), and they still exit 0 with the
run completed (not exit 1 with "cannot use the database: terminating connection due
to administrator command", nor ``run`` leaving its run unserved)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from helpers.cli import clean_env
from helpers.flows import step_flow_text
from helpers.own_server import OwnServer, own_server
from helpers.paths import CLI, REPO, TEST_HANDLERS
from helpers.procs import WorkerProcess, wait_until

from cyclone_flow import migrate
from cyclone_flow.db.errors import OUTAGE_GRACE_S

SLEEP = "cyclone_test_handlers.ops:short_sleep"


@pytest.fixture
def scratch_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnServer]:
    """A migrated Postgres of this test's own, to restart at will."""
    with own_server(tmp_path_factory.mktemp("own-server")) as pg:
        migrate(pg.uri)
        yield pg


def _spawn(args: list[str], out: Path) -> subprocess.Popen[bytes]:
    """The CLI with ``args``; its stdout in ``out``, its stderr in ``out`` + ``.err``."""
    with open(out, "wb") as stdout, open(_err(out), "wb") as stderr:
        return subprocess.Popen(
            [str(CLI), *args], cwd=REPO, env=clean_env(), stdout=stdout, stderr=stderr
        )


def _err(out: Path) -> Path:
    return out.with_suffix(".err")


def _finish(proc: subprocess.Popen[bytes], out: Path, timeout: float) -> str:
    """Wait for ``proc`` (killed after ``timeout`` seconds) and return its stderr."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return _err(out).read_text(errors="replace")


def _run_state(url: str) -> str | None:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT state FROM cyclone_runs ORDER BY created_at DESC LIMIT 1"
        ).fetchone()
    return None if row is None else str(row[0])


def test_submit_wait_rides_out_two_restarts(scratch_pg: OwnServer, tmp_path: Path) -> None:
    flow = tmp_path / "nap.yaml"
    flow.write_text(step_flow_text(SLEEP, name="nap"), encoding="utf-8")
    marker = tmp_path / "ran"
    waiter = _spawn(
        [
            "submit",
            str(flow),
            "--input",
            json.dumps({"marker": str(marker), "seconds": 0}),
            "--wait",
            "--timeout",
            "60s",
            "--database-url",
            scratch_pg.uri,
        ],
        tmp_path / "submit.out",
    )
    worker: WorkerProcess | None = None
    try:
        wait_until(lambda: _run_state(scratch_pg.uri) == "running", 30, what="the submit")
        for _ in range(2):  # no worker yet: the run waits, and so does `submit --wait`
            scratch_pg.restart()
            assert waiter.poll() is None, "submit --wait gave up on a restart"
        worker = WorkerProcess(scratch_pg.uri, "public", tmp_path / "worker.log")
        stderr = _finish(waiter, tmp_path / "submit.out", 90)
        assert waiter.returncode == 0, stderr
        assert "Traceback" not in stderr, stderr
        assert marker.exists()
        assert _run_state(scratch_pg.uri) == "completed"
    finally:
        _finish(waiter, tmp_path / "submit.out", 0)
        if worker is not None:
            worker.terminate()


def _spawn_nap_run(server: OwnServer, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """`cyclone-flow run` of a one-step flow on ``server`` whose handler touches a marker
    file, then sleeps 2 s; its stdout in ``run.out``. Returns the process and the marker."""
    flow = tmp_path / "nap.yaml"
    flow.write_text(step_flow_text(SLEEP, name="nap"), encoding="utf-8")
    marker = tmp_path / "ran"
    runner = _spawn(
        [
            "run",
            str(flow),
            "--import-path",
            str(TEST_HANDLERS),
            "--input",
            json.dumps({"marker": str(marker), "seconds": 2}),
            "--database-url",
            server.uri,
        ],
        tmp_path / "run.out",
    )
    return runner, marker


def test_run_rides_out_a_restart_while_its_handler_runs(
    scratch_pg: OwnServer, tmp_path: Path
) -> None:
    runner, marker = _spawn_nap_run(scratch_pg, tmp_path)
    try:
        wait_until(marker.exists, 60, what="the run's handler to start")
        scratch_pg.restart()  # mid-handler: the run's own worker and its follower lose it
        stderr = _finish(runner, tmp_path / "run.out", 120)
        assert runner.returncode == 0, stderr
        output = json.loads((tmp_path / "run.out").read_text())
        assert output == {"s": {"pid": runner.pid}}
        assert _run_state(scratch_pg.uri) == "completed"
    finally:
        _finish(runner, tmp_path / "run.out", 0)


@pytest.mark.slow
def test_run_says_its_run_is_still_running_when_the_database_stays_away(
    scratch_pg: OwnServer, tmp_path: Path
) -> None:
    """The database stopped for good: after the outage grace (60 s) `run` gives up with
    exit 1 and the note its Ctrl-C path prints, never silently."""
    runner, marker = _spawn_nap_run(scratch_pg, tmp_path)
    try:
        wait_until(marker.exists, 60, what="the run's handler to start")
        scratch_pg.stop()
        stderr = _finish(runner, tmp_path / "run.out", OUTAGE_GRACE_S + 60)
        assert runner.returncode == 1, stderr
        assert "error: cannot use the database" in stderr, stderr
        assert "is still running; a `cyclone-flow worker` can finish it" in stderr, stderr
    finally:
        _finish(runner, tmp_path / "run.out", 0)

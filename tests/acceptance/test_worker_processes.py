"""``cyclone-flow worker --processes N`` through the real CLI: a
supervisor runs N worker processes, each its own client (its own ``cyclone_workers``
row); a SIGKILLed child is restarted and its step reclaimed; SIGTERM to the supervisor
stops every child gracefully (their steps released, not left running) and it exits 0;
bad values exit 2."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import WORKER, Runner, clean_env, no_traceback
from helpers.flows import step_flow
from helpers.paths import CLI, TEST_HANDLERS
from helpers.procs import WorkerProcess, wait_until
from helpers.rows import step_row

from cyclone_flow import Client

OPS = "cyclone_test_handlers.ops"
FAST = ["--poll-interval", "20ms,100ms"]


def _live(db: Any) -> dict[int, str]:
    """``{pid: client_id}`` of the live ``cyclone_workers`` rows (heartbeated within
    their lease TTL)."""
    rows = db.execute(
        "SELECT pid, client_id FROM cyclone_workers WHERE heartbeat_at >= now() - lease_ttl"
    ).fetchall()
    return {int(pid): client_id for pid, client_id in rows}


def _two_live(db: Any, supervisor: WorkerProcess) -> dict[int, str]:
    live = wait_until(
        lambda: rows if len(rows := _live(db)) == 2 else None,
        timeout=60,
        what="both worker processes to register",
    )
    assert supervisor.pid not in live  # the workers are the supervisor's children
    assert len(set(live.values())) == 2  # each its own client id
    return live


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _running_held(db: Any, run_id: str, marker: Path) -> dict[str, Any] | None:
    row = step_row(db, run_id)
    return row if marker.exists() and row["state"] == "running" else None


def test_a_killed_child_is_restarted_and_its_step_reclaimed(
    make_client: Callable[..., Client],
    db: Any,
    database_url: str,
    schema: str,
    tmp_path: Path,
) -> None:
    submitter = make_client()
    supervisor = WorkerProcess(
        database_url,
        schema,
        tmp_path / "worker.log",
        lease_ttl="1s",
        extra_args=["--processes", "2", "--shutdown-timeout", "2s", *FAST],
    )
    try:
        first = _two_live(db, supervisor)
        marker = tmp_path / "entered"
        run_id = submitter.submit(
            step_flow(f"{OPS}:cooperative_once", name="held"), {"marker": str(marker)}
        )
        held = wait_until(
            lambda: _running_held(db, run_id, marker), timeout=30, what="a child to hold it"
        )
        (victim,) = [pid for pid, cid in first.items() if cid == held["lease_owner"]]
        os.kill(victim, signal.SIGKILL)

        restarted = wait_until(
            lambda: rows if len(rows := _live(db)) == 2 and victim not in rows else None,
            timeout=60,
            what="the killed child to be replaced by a new live worker",
        )
        (new_pid,) = set(restarted) - set(first)
        assert new_pid != supervisor.pid
        row = wait_until(
            lambda: (r := step_row(db, run_id))["state"] == "completed" and r,
            timeout=60,
            what="the killed child's step to be reclaimed and completed",
        )
        assert (row["reclaims"], row["attempt"]) == (1, 1)
        assert row["lease_owner"] != held["lease_owner"]
        assert submitter.get_run(run_id).state == "completed"
        # the fleet as restarted runs new work too
        more = [
            submitter.submit(
                step_flow(f"{OPS}:short_sleep", name="quick"),
                {"marker": str(tmp_path / f"quick{i}"), "seconds": 0},
            )
            for i in range(4)
        ]
        wait_until(
            lambda: all(submitter.get_run(r).state == "completed" for r in more),
            timeout=60,
            what="the runs submitted after the restart to complete",
        )
        assert _gone(victim)
    finally:
        code = supervisor.terminate(timeout=60)
    log = supervisor.log()
    assert code == 0, log
    assert f"(pid {victim}) was killed by SIGKILL; restarting it in 0.5 s" in log, log
    assert _live(db) == {}
    assert all(_gone(pid) for pid in restarted)


def test_sigterm_stops_both_children_gracefully_and_exits_0(
    make_client: Callable[..., Client],
    db: Any,
    database_url: str,
    schema: str,
    tmp_path: Path,
    cli: Runner,
) -> None:
    submitter = make_client()
    supervisor = WorkerProcess(
        database_url,
        schema,
        tmp_path / "worker.log",
        lease_ttl="60s",  # long: a step that is not running afterwards was released
        extra_args=["--processes", "2", "--shutdown-timeout", "1s", *FAST],
    )
    try:
        live = _two_live(db, supervisor)
        markers = [tmp_path / "one", tmp_path / "two"]
        runs = [
            submitter.submit(
                step_flow(f"{OPS}:cooperative_once", name="held"), {"marker": str(marker)}
            )
            for marker in markers
        ]
        held = [
            wait_until(
                lambda r=r, m=m: _running_held(db, r, m), timeout=30, what="a child to hold it"
            )
            for r, m in zip(runs, markers, strict=True)
        ]
        # one thread per child: each child holds one of the two steps
        assert {row["lease_owner"] for row in held} == set(live.values())
    finally:
        code = supervisor.terminate(timeout=60)
    log = supervisor.log()
    assert code == 0, log
    assert "SIGTERM: stopping the 2 worker processes" in log, log
    assert "processes: every worker process stopped" in log, log
    assert all(_gone(pid) for pid in live)
    assert db.execute("SELECT count(*) FROM cyclone_workers").fetchone()[0] == 0
    for run_id in runs:
        row = step_row(db, run_id)
        # released at the stop: claimable at once, no lease, no attempt or reclaim charged
        assert (row["state"], row["lease_expiry"]) == ("available", None), row
        assert (row["attempt"], row["reclaims"]) == (1, 0)
    done = cli(*WORKER, *FAST)  # the released steps run at once elsewhere
    assert done.returncode == 0, done.stderr
    assert all(submitter.get_run(r).state == "completed" for r in runs)


def test_children_stop_gracefully_when_the_supervisor_is_killed(
    db: Any, database_url: str, schema: str, tmp_path: Path
) -> None:
    supervisor = WorkerProcess(
        database_url,
        schema,
        tmp_path / "worker.log",
        lease_ttl="60s",  # long: a row gone within the test was deleted by a clean stop
        extra_args=["--processes", "2", "--shutdown-timeout", "1s", *FAST],
    )
    live: dict[int, str] = {}
    try:
        live = _two_live(db, supervisor)
        supervisor.kill()
        wait_until(
            lambda: db.execute("SELECT count(*) FROM cyclone_workers").fetchone()[0] == 0,
            timeout=60,
            what="the orphaned workers to shut down cleanly (their rows deleted)",
        )
    except BaseException:
        supervisor.kill()
        for pid in live:  # failed: leave no orphan running
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise
    assert "the supervisor (pid" in supervisor.log()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--processes", "0"], "0 is not in the range x>=1"),
        (["--processes", "-3"], "-3 is not in the range x>=1"),
        (["--processes", "two"], "'two' is not a valid integer"),
        (
            ["--processes", "3", "--metrics-port", "65534"],
            "3 processes serve metrics on ports 65534 to 65536, past 65535",
        ),
    ],
    ids=["zero", "negative", "not-a-number", "metrics-ports"],
)
def test_bad_process_counts_exit_2(cli: Runner, args: list[str], message: str) -> None:
    result = cli(*WORKER, *args)
    assert result.returncode == 2, result.stderr
    assert "--processes" in result.stderr or "--metrics-port" in result.stderr
    assert message in result.stderr, result.stderr
    no_traceback(result)


def test_reload_restarts_every_process_and_sigterm_stops_them(
    db: Any, database_url: str, schema: str, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    module = project / "watched.py"
    module.write_text("VERSION = 1\n", encoding="utf-8")
    log_path = tmp_path / "worker.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [str(CLI), "worker", "--reload", "--processes", "2",
             "--allow-module", "cyclone_test_handlers", "--import-path", str(TEST_HANDLERS),
             "--import-path", str(project),  # watched: --reload watches import paths
             "--lease-ttl", "1s", "--shutdown-timeout", "1s", *FAST,
             "--database-url", database_url, "--schema", schema],
            cwd=project, env=clean_env(), stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            first = wait_until(
                lambda: rows if len(rows := _live(db)) == 2 else None,
                timeout=60,
                what="both worker processes to register",
            )
            assert proc.pid not in first
            module.write_text("VERSION = 2\n", encoding="utf-8")
            second = wait_until(
                lambda: (
                    rows if len(rows := _live(db)) == 2 and not set(rows) & set(first) else None
                ),
                timeout=60,
                what="both worker processes to be restarted",
            )
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log_path.read_text(encoding="utf-8")
    assert code == 0, text
    assert "watched.py changed; restarting the worker" in text
    assert _live(db) == {}
    assert all(_gone(pid) for pid in (*first, *second))

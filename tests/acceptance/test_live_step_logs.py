"""Live step logs through the real CLI: a running step's lines are in
``cyclone-flow logs RUN`` and streamed by ``logs --follow`` while it runs (a worker process
flushes them about every second), and they stay when the worker is killed with SIGKILL
mid-attempt; ``logs`` of a run without lines says so on stderr."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from helpers.cli import Runner, clean_env
from helpers.paths import CLI
from helpers.procs import WorkerProcess, wait_until

from cyclone_flow import Client

CALL = "cyclone_test_handlers.chatty:log_then_wait"


def test_a_running_steps_lines_are_shown_followed_and_kept_when_the_worker_is_killed(
    cli: Runner,
    make_client: Callable[..., Client],
    database_url: str,
    schema: str,
    tmp_path: Path,
) -> None:
    client = make_client()
    release = tmp_path / "release"  # never created: the step runs until the worker dies
    run_id = client.enqueue(CALL, {"line": "still running", "release": str(release)})
    worker = WorkerProcess(database_url, schema, tmp_path / "worker.log", lease_ttl="30s")
    try:
        shown = wait_until(
            lambda: "still running" in (p := cli("logs", run_id)).stdout and p,
            timeout=30,
            interval=0.2,
            what=f"the running step's line in `logs` (worker log: {worker.log_path})",
        )
        assert shown.returncode == 0 and " job#1 stdout: still running\n" in shown.stdout
        assert client.get_run(run_id).state == "running"

        with subprocess.Popen(
            [str(CLI), "logs", run_id, "--follow", "--database-url", database_url,
             "--schema", schema],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=clean_env(),
        ) as follow:  # fmt: skip
            got: list[str] = []
            out = follow.stdout
            reader = threading.Thread(target=lambda: got.extend(out or []), daemon=True)
            reader.start()
            try:
                wait_until(lambda: any("still running" in x for x in got), timeout=15,
                           what="`logs --follow` printing the running step's line")  # fmt: skip
                assert follow.poll() is None  # still following: the run is running
            finally:
                follow.kill()
                reader.join(5)

        worker.kill()  # SIGKILL mid-attempt
        kept = [x.message for x in client.list_step_logs(run_id)]
        assert kept == ["still running", "cyclone_flow.step: logged: still running"]
    finally:
        worker.kill()


def test_logs_of_a_run_without_lines_says_so_on_stderr(
    cli: Runner, make_client: Callable[..., Client]
) -> None:
    run_id = make_client().enqueue("cyclone_test_handlers.chatty:loud", {"lines": 0})
    proc = cli("logs", run_id)
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == f"run {run_id} has no log lines"
    node = cli("logs", run_id, "--node", "job", "--attempt", "1", "--json")
    assert node.returncode == 0 and node.stdout == ""
    assert node.stderr.splitlines()[-1] == f"run {run_id} has no log lines of node job, attempt 1"

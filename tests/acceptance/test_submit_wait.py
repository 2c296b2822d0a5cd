"""``cyclone-flow submit --wait [--timeout S]`` (the real console script) while a worker
client runs in the test process: exit 0 when the run completed, 1 when it failed or the
wait timed out, with a clear message and no traceback."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.cli import Runner, no_traceback

FLOW = """\
name: {name}
nodes:
  only:
    call: cyclone_test_handlers.basic:{call}
    queue: {queue}
"""


def _flow_file(tmp_path: Path, call: str, queue: str = "default") -> Path:
    path = tmp_path / f"{call}-{queue}.yaml"
    path.write_text(FLOW.format(name=f"wait-{call}", call=call, queue=queue), encoding="utf-8")
    return path


def test_submit_wait_exits_0_when_the_run_completes(cli: Runner, make_client, tmp_path) -> None:
    make_client(workers=1).start()
    proc = cli("submit", _flow_file(tmp_path, "echo"), "--input", '{"a": 1}', "--wait")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    run_id, *rest = proc.stdout.splitlines()  # the run id at once, its output at the end
    assert len(run_id) == 36
    assert json.loads("\n".join(rest)) == {"only": {"a": 1}}, proc.stdout
    assert f"run {run_id} completed" in proc.stderr
    assert "  step only completed" in proc.stderr  # progress lines (not a terminal)


def test_submit_wait_json_prints_the_finished_run(cli: Runner, make_client, tmp_path) -> None:
    make_client(workers=1).start()
    proc = cli("submit", _flow_file(tmp_path, "echo"), "--input", '{"a": 2}', "--wait", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["state"], data["output"]) == ("completed", {"only": {"a": 2}})


def test_submit_wait_exits_1_when_the_run_fails(cli: Runner, make_client, tmp_path) -> None:
    make_client(workers=1).start()
    proc = cli("submit", _flow_file(tmp_path, "boom"), "--wait", "--timeout", "60s")
    no_traceback(proc)
    assert proc.returncode == 1
    run_id = proc.stdout.strip()
    assert f"run {run_id} failed: step only discarded" in proc.stderr


def test_submit_wait_timeout_exits_1_and_leaves_the_run(cli: Runner, tmp_path) -> None:
    proc = cli("submit", _flow_file(tmp_path, "echo", "unserved"), "--wait", "--timeout", "300ms")
    no_traceback(proc)
    assert proc.returncode == 1
    run_id = proc.stdout.strip()
    assert f"run {run_id} is still running after waiting 0.3 s" in proc.stderr
    status = cli("status", run_id, "--json")
    assert json.loads(status.stdout)["state"] == "running"


def test_submit_timeout_needs_wait(cli: Runner, tmp_path) -> None:
    proc = cli("submit", _flow_file(tmp_path, "echo"), "--timeout", "5s")
    no_traceback(proc)
    assert proc.returncode == 2
    assert "--timeout goes with --wait" in proc.stderr
    bad = cli("submit", _flow_file(tmp_path, "echo"), "--wait", "--timeout", "soon")
    assert bad.returncode == 2
    assert "--timeout" in bad.stderr

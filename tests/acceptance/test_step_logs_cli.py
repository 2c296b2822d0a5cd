"""Step logs through the real CLI: a handler's ``print`` in ``cyclone-flow run
flow.yaml --json`` no longer lands on stdout (which carries only the JSON result, so
``| jq`` works); ``cyclone-flow logs`` shows the print, the logging records and the
traceback per attempt, filtered by ``--node`` / ``--attempt``; ``status`` shows the last
lines."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from helpers.cli import WORKER, Runner, json_output, no_traceback
from helpers.paths import TEST_HANDLERS

from cyclone_flow import Client

FLOW = """name: chatty
nodes:
  s:
    call: cyclone_test_handlers.chatty:chatty
    retry: {max_attempts: 2, backoff: {initial: 0s}}
"""


def test_run_json_stays_json_and_logs_show_what_the_handler_printed(
    cli: Runner, tmp_path: Path
) -> None:
    flow = tmp_path / "chatty.yaml"
    flow.write_text(FLOW)
    proc = cli("run", flow, "--import-path", TEST_HANDLERS, "--json")
    assert proc.returncode == 0, proc.stderr
    # the handler's logging records still reach the CLI's log handler (stderr) as well
    result = json_output(proc.stdout)  # the whole stdout is the one JSON document
    assert result["state"] == "completed"
    assert "hello from print" not in proc.stdout + proc.stderr
    run_id = result["id"]

    logs = cli("logs", run_id)
    assert logs.returncode == 0, logs.stderr
    text = logs.stdout
    assert " s#1 stdout: hello from print, attempt 1\n" in text
    assert " s#1 stderr: line\n" in text
    assert " s#1 log WARNING: chatty: a warning record\n" in text
    assert " s#1 log INFO: cyclone_flow.step: ctx.log says hi\n" in text
    assert (
        " s#1 log ERROR: the handler raised ValueError: first attempt fails\n"
        "Traceback (most recent call last):"
    ) in text
    assert "ValueError: first attempt fails" in text
    assert " s#2 stdout: hello from print, attempt 2\n" in text

    only = cli("logs", run_id, "--node", "s", "--attempt", "2", "--json")
    rows = [json.loads(line) for line in only.stdout.splitlines()]
    assert {r["attempt"] for r in rows} == {2} and len(rows) == 6
    assert rows[0]["message"] == "hello from print, attempt 2" and rows[0]["at"][10] == "T"
    follow = cli("logs", run_id, "--follow", timeout=30)  # the run ended: prints and exits
    assert follow.returncode == 0 and follow.stdout == text

    status = cli("status", run_id)
    assert f"last log lines (all: cyclone-flow logs {run_id}):" in status.stdout
    assert " s#2 stdout: partial " in status.stdout
    assert " log ERROR: chatty: logged with its traceback (+4 lines)" in status.stdout
    no_traceback(status)  # first lines only: the tracebacks are in `logs`
    tail = json_output(cli("status", run_id, "--json").stdout)["log_tail"]
    assert [t["attempt"] for t in tail] == [2] * 5

    missing = cli("logs", "00000000-0000-0000-0000-000000000000")
    assert missing.returncode == 1 and "not found" in missing.stderr
    no_traceback(missing)


def test_a_print_in_run_json_leaves_stdout_json(cli: Runner, tmp_path: Path) -> None:
    """One print, then ``run --json``: stdout is only the JSON document (the printed line
    goes to the step's logs, not before the document)."""
    flow = tmp_path / "loud.yaml"
    flow.write_text(
        "name: loud\nnodes:\n  s: {call: cyclone_test_handlers.chatty:loud, input: {lines: 1}}\n"
    )
    proc = cli("run", flow, "--import-path", TEST_HANDLERS, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json_output(proc.stdout)["output"] == {"s": None}
    assert "0000xxx" not in proc.stdout + proc.stderr


def test_a_child_process_and_os_write_leave_run_json_stdout_json(
    cli: Runner, tmp_path: Path
) -> None:
    """Output written to descriptor 1 (a child process the handler runs,
    ``os.write(1, ...)``) is in the step's ``logs``, and stdout is only the JSON (nothing
    before the document)."""
    flow = tmp_path / "child.yaml"
    flow.write_text("name: child\nnodes:\n  s: {call: cyclone_test_handlers.chatty:child_output}\n")
    proc = cli("run", flow, "--import-path", TEST_HANDLERS, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json_output(proc.stdout)
    assert result["output"] == {"s": {"ok": True}}
    assert "hello" not in proc.stderr and "to fd 2" not in proc.stderr
    logs = cli("logs", result["id"])
    assert " s#1 stdout: hello\n" in logs.stdout
    assert " s#1 stdout: x\n" in logs.stdout
    assert " s#1 stderr: to fd 2\n" in logs.stdout
    assert "submitted" not in logs.stdout  # the CLI's own lines are not a step's


def test_a_workers_child_process_output_goes_to_its_step_and_its_own_lines_to_stderr(
    cli: Runner, make_client: Callable[..., Client]
) -> None:
    client = make_client()
    run_id = client.enqueue("cyclone_test_handlers.chatty:child_output")
    proc = cli(*WORKER)
    assert proc.returncode == 0, proc.stderr
    assert "hello" not in proc.stdout + proc.stderr
    assert " started: queues default=4" in proc.stderr  # the worker's own log lines
    assert client.get_run(run_id).state == "completed"
    messages = {(x.stream, x.message) for x in client.list_step_logs(run_id)}
    assert {("stdout", "hello"), ("stdout", "x"), ("stderr", "to fd 2")} <= messages

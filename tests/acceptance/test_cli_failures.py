"""Acceptance tests of the operator commands for failures: ``cancel``, ``retry``,
``retry --node``, ``retry --all-failed [--flow]``, ``status`` of failed runs, and
``worker --max-reclaims`` validation; the real console script against a real Postgres."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import Runner, no_traceback
from helpers.paths import TEST_HANDLERS

OUTAGE_FLOW = """\
name: outage
nodes:
  a:
    call: cyclone_test_handlers.failures:fails_while_flag
    input: {flag: "${{ run.input.flag }}"}
    retry: {max_attempts: 2, backoff: {initial: 0}}
  b:
    call: cyclone_test_handlers.basic:echo
    needs: [a]
    input: {a: "${{ nodes.a.output }}"}
"""

PARKED_FLOW = """\
name: parked
nodes:
  p: {call: "cyclone_test_handlers.basic:echo", queue: nobody}
  q: {call: "cyclone_test_handlers.basic:echo", needs: [p]}
"""


def _ok(proc: Any) -> str:
    no_traceback(proc)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    return str(proc.stdout)


def _status(cli: Runner, run_id: str) -> dict[str, Any]:
    proc = cli("status", run_id, "--json")  # its stdout holds the handlers' tracebacks
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    data["by_node"] = {s["node"]: s for s in data["steps"]}
    return data


def _drain(cli: Runner) -> None:
    """One worker process that exits when nothing is left to do."""
    _ok(
        cli(
            "worker",
            "--exit-when-idle",
            "--allow-module",
            "cyclone_test_handlers",
            "--import-path",
            TEST_HANDLERS,
            "--lease-ttl",
            "5s",
            "--poll-interval",
            "20ms,200ms",
        )
    )


def test_failed_runs_status_then_retry_node_and_retry_all_failed(
    cli: Runner, tmp_path: Path
) -> None:
    flow = tmp_path / "outage.yaml"
    flow.write_text(OUTAGE_FLOW)
    flag = tmp_path / "outage.flag"
    flag.write_text("down")
    run_input = json.dumps({"flag": str(flag)})
    first = _ok(cli("submit", flow, "--input", run_input)).strip()
    second = _ok(cli("submit", flow, "--input", run_input)).strip()
    _drain(cli)

    failed = json.loads(_ok(cli("runs", "--json", "--state", "failed")))
    assert sorted(r["id"] for r in failed) == sorted([first, second])
    data = _status(cli, first)
    assert (data["state"], data["error_kind"]) == ("failed", "step_discarded")
    a, b = data["by_node"]["a"], data["by_node"]["b"]
    assert (a["state"], a["attempt"], a["error_kind"]) == ("discarded", 2, "handler_error")
    assert [e["attempt"] for e in a["errors"]] == [1, 2]
    assert "RuntimeError: outage" in a["errors"][0]["traceback"]
    assert b["state"] == "cancelled"
    text = _ok(cli("status", first))
    assert "failed" in text and "outage: outage.flag is present" in text

    flag.unlink()  # the operator fixes the outage
    retried = _ok(cli("retry", first, "--node", "a"))
    assert retried.strip() == f"run {first} retried: a, b"
    assert _status(cli, first)["state"] == "running"
    none = cli("retry", "--all-failed", "--flow", "other-flow")
    assert _ok(none) == "" and "retried 0 failed run(s)" in none.stderr
    assert _ok(cli("retry", "--all-failed", "--flow", "outage", "--yes")).split() == [second]
    _drain(cli)

    done = json.loads(_ok(cli("runs", "--json", "--state", "completed")))
    assert sorted(r["id"] for r in done) == sorted([first, second])
    assert all(r["output"] == {"b": {"a": {"attempt": 1}}} for r in done)
    a = _status(cli, first)["by_node"]["a"]
    assert (a["attempt"], a["reclaims"], len(a["errors"])) == (1, 0, 2)  # history kept

    again = cli("retry", first)
    no_traceback(again)
    assert again.returncode == 1 and f"run {first} is completed" in again.stderr


def test_cancel_then_retry_a_cancelled_run(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "parked.yaml"
    flow.write_text(PARKED_FLOW)
    run_id = _ok(cli("submit", flow)).strip()
    assert _ok(cli("cancel", run_id)).strip() == f"run {run_id} cancelled"
    data = _status(cli, run_id)
    assert data["state"] == "cancelled"
    assert {n: s["state"] for n, s in data["by_node"].items()} == {
        "p": "cancelled",
        "q": "cancelled",
    }
    twice = cli("cancel", run_id)
    no_traceback(twice)
    assert twice.returncode == 1 and "already cancelled; nothing cancelled" in twice.stderr

    assert _ok(cli("retry", run_id)).strip() == f"run {run_id} retried: p, q"
    data = _status(cli, run_id)
    assert data["state"] == "running"
    assert {n: s["state"] for n, s in data["by_node"].items()} == {
        "p": "available",
        "q": "pending",
    }


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["worker", "--allow-module", "x", "--max-reclaims", "-1"], 2, "--max-reclaims"),
        (["retry"], 2, "give a RUN_ID or --all-failed"),
        (["retry", "00000000-0000-0000-0000-000000000000", "--all-failed"], 2, "not both"),
        (["retry", "--all-failed", "--node", "a"], 2, "--node goes with a RUN_ID"),
        (["retry", "00000000-0000-0000-0000-000000000000", "--flow", "f"], 2, "--flow goes"),
        (["retry", "00000000-0000-0000-0000-000000000000"], 1, "not found"),
        (["cancel", "00000000-0000-0000-0000-000000000000"], 1, "not found"),
        (["cancel", "not-a-run"], 1, "not found"),
    ],
    ids=[
        "negative-max-reclaims",
        "retry-nothing",
        "retry-both",
        "retry-all-node",
        "retry-run-flow",
        "retry-unknown",
        "cancel-unknown",
        "cancel-garbage",
    ],
)
def test_operator_usage_mistakes(cli: Runner, args: list[str], code: int, needle: str) -> None:
    proc = cli(*args)
    no_traceback(proc)
    assert proc.returncode == code, proc.stderr
    assert needle in proc.stderr

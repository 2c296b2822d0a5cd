"""CLI rough edges found by breakers (task cli27), through the real ``cyclone-flow``:
``doctor`` exits 2 with a JSON error document when it cannot check; a part-failed bulk
submission with ``--json`` still lists what it wrote and the item that stopped it; the
bulk ``enqueue`` bar counts jobs; ``schedule trigger --json``; ``rerun --from N --failed``
reruns from both; a run id prefix of fewer than 4 hex digits is called too short."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import Runner, clean_env, json_output, no_traceback, run_cli
from helpers.procs import wait_until
from helpers.pty_cli import PtyProcess

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text

NOOP = "cyclone_test_handlers.queueing:noop"
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/x"


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


# -- doctor: 1 means warnings, 2 that it could not check --------------------------------


def test_doctor_on_an_unreachable_database_exits_2_with_an_error_document() -> None:
    done = run_cli("doctor", "--json", "--database-url", UNREACHABLE, timeout=60)
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    document = json_output(done.stdout)
    assert document["healthy"] is None, document
    assert document["error"].startswith("cannot use the database: "), document
    assert _errors(done.stderr) == [f"error: {document['error']}"], done.stderr
    plain = run_cli("doctor", "--database-url", UNREACHABLE, timeout=60)
    assert plain.returncode == 2 and plain.stdout == "", plain.stderr
    assert "cannot use the database" in plain.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--xact-age", "soon"), "--xact-age"),  # refused by the command
        (("--reclaims", "-1"), "--reclaims"),  # refused by click while parsing
        (("--no-such-option",), "--no-such-option"),
    ],
    ids=["duration", "range", "unknown-option"],
)
def test_doctor_json_usage_mistakes_print_an_error_document(
    cli: Runner, args: tuple[str, ...], needle: str
) -> None:
    done = cli("doctor", "--json", *args)
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    document = json_output(done.stdout)
    assert document["healthy"] is None and needle in document["error"], document
    assert "error:" in done.stderr


def test_doctor_without_an_embedded_database_here_exits_2(tmp_path: Path) -> None:
    env = clean_env(CYCLONE_HOME=str(tmp_path / "home"))
    done = run_cli("doctor", "--json", cwd=tmp_path, env=env, timeout=60)
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    document = json_output(done.stdout)
    assert document["healthy"] is None
    assert document["error"].startswith("no embedded Postgres in "), document
    assert _errors(done.stderr) == [f"error: {document['error']}"], done.stderr
    assert not (tmp_path / "home" / "pgdata").exists()  # nothing was created


# -- bulk submission: what a part failure wrote, on stdout ------------------------------

BULK_FLOW = f"""
name: bulk-edges
input_schema:
  type: object
  properties: {{n: {{type: integer}}}}
  required: [n]
nodes:
  a: {{call: "{NOOP}"}}
"""


def test_a_part_failed_bulk_submit_with_json_lists_the_runs_written_and_the_failed_item(
    cli: Runner, tmp_path: Path, db: Any
) -> None:
    flow = tmp_path / "bulk.yaml"
    flow.write_text(BULK_FLOW)
    lines = tmp_path / "in.jsonl"
    # chunk 1: lines 1 and 3 (written); chunk 2: line 4 is invalid, line 5 not written
    lines.write_text('{"n": 1}\n\n{"n": 2}\n{"n": "two"}\n{"n": 4}\n')
    done = cli("submit", flow, "--inputs-file", lines, "--chunk", "2", "--json")
    no_traceback(done)
    assert done.returncode == 1, done.stderr
    out = json_output(done.stdout)
    assert out["count"] == 2 and out["duplicates"] == 0, out
    inputs = dict(db.execute("SELECT id::text, input FROM cyclone_runs").fetchall())
    assert [inputs[i] for i in out["run_ids"]] == [{"n": 1}, {"n": 2}]
    assert len(inputs) == 2
    [failed] = out["failed"]
    assert (failed["index"], failed["line"]) == (2, 4), failed
    assert "'two'" in failed["error"] and "input of flow 'bulk-edges'" in failed["error"]
    assert out["error"].startswith(f"{lines}:4: "), out
    assert "2 run(s) were written before it (lines 1-3)" in out["error"]
    assert _errors(done.stderr) == [f"error: {out['error']}"], done.stderr
    # a malformed line (exit 2) gives the same document
    lines.write_text('{"n": 5}\n{"n": 6\n')
    bad = cli("submit", flow, "--inputs-file", lines, "--json")
    assert bad.returncode == 2, bad.stderr
    out = json_output(bad.stdout)
    assert (out["count"], out["run_ids"]) == (0, [])
    [failed] = out["failed"]
    assert (failed["index"], failed["line"]) == (1, 2) and "not valid JSON" in failed["error"]
    # all written: nothing failed
    lines.write_text('{"n": 7}\n')
    ok = cli("enqueue", NOOP, "--args-file", lines, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json_output(ok.stdout)["failed"] == []


@pytest.mark.parametrize(
    ("kind", "unit", "other"), [("enqueue", "jobs", "runs"), ("submit", "runs", "jobs")]
)
def test_the_bulk_progress_bar_counts_jobs_for_enqueue_and_runs_for_submit(
    database_url: str, schema: str, tmp_path: Path, kind: str, unit: str, other: str
) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"n": 1}\n{"n": 2}\n')
    flow = tmp_path / "bulk.yaml"
    flow.write_text(BULK_FLOW)
    args = (
        ("enqueue", NOOP, "--args-file") if kind == "enqueue" else ("submit", flow, "--inputs-file")
    )
    proc = PtyProcess(
        *args, lines, "--database-url", database_url, "--schema", schema, cwd=tmp_path
    )
    try:
        code = proc.wait(timeout=120)
    finally:
        proc.kill()
    assert code == 0, proc.raw
    bar = [line for line in proc.raw.replace("\r", "\n").splitlines() if "0:00:" in line]
    assert bar, proc.raw  # the bar was drawn (it is erased at the end)
    assert all(f" {unit}" in line and f" {other}" not in line for line in bar), bar


# -- schedule trigger --json ---------------------------------------------------------------


def test_schedule_trigger_json(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "report.yaml"
    flow.write_text(
        f"name: report\nnodes:\n  a: {{call: '{NOOP}'}}\n"
        "schedules:\n  - {name: report-daily, cron: '@daily'}\n"
    )
    assert cli("schedule", "sync", flow).returncode == 0
    fired = cli("schedule", "trigger", "report-daily", "--json")
    no_traceback(fired)
    assert fired.returncode == 0, fired.stderr
    out = json_output(fired.stdout)
    assert out == {"schedule": "report-daily", "run_id": out["run_id"], "duplicate": False}
    status = json_output(cli("status", out["run_id"], "--json").stdout)
    assert status["flow_name"] == "report"
    missing = cli("schedule", "trigger", "ghost", "--json")
    assert missing.returncode == 1 and "schedule 'ghost' not found" in missing.stderr


# -- rerun --from NODE --failed: from both -------------------------------------------------

GATED = load_flow_text(
    """
name: cli-rerun-both
nodes:
  a: {call: 'cyclone_test_handlers.conditions:value', input: {n: 1}}
  b: {call: 'cyclone_test_handlers.conditions:value', needs: [a], input: {n: 2}}
  gate: {type: wait_signal, signal: go}
"""
)


def test_rerun_from_a_node_and_failed_reruns_from_both(
    cli: Runner, make_client: Callable[..., Client]
) -> None:
    client = make_client(workers=1)
    client.start()
    original = client.submit(GATED, {})
    wait_until(
        lambda: {s.node: s.state for s in client.list_steps(original)}.get("b") == "completed",
        what="a and b to complete while the gate waits",
    )
    assert client.cancel(original)  # the gate is cancelled, a and b stay completed
    both = cli("rerun", original, "--from", "b", "--failed", "--json")
    no_traceback(both)
    assert both.returncode == 0, both.stderr
    out = json_output(both.stdout)
    assert (sorted(out["rerun"]), out["reused"]) == (["b", "gate"], ["a"]), out
    failed_only = json_output(cli("rerun", original, "--failed", "--json").stdout)
    assert (failed_only["rerun"], sorted(failed_only["reused"])) == (["gate"], ["a", "b"])
    refused = cli("rerun", original, "--from", "b")
    assert refused.returncode == 1 and "--failed" in refused.stderr, refused.stderr


# -- a run id prefix too short ----------------------------------------------------------


def test_a_run_id_prefix_under_4_hex_digits_is_called_too_short(cli: Runner) -> None:
    for args in (("status", "abc"), ("logs", "a"), ("cancel", "0F"), ("graph", "--run", "abc")):
        done = cli(*args)
        no_traceback(done)
        assert done.returncode == 1, (args, done.stderr)
        assert _errors(done.stderr) == [
            f"error: run id {args[-1]!r} is too short: give at least 4 hex digits of it "
            "(or the whole id)"
        ], (args, done.stderr)
    not_hex = cli("status", "xyz")
    assert not_hex.returncode == 1 and "run xyz not found" in not_hex.stderr, not_hex.stderr

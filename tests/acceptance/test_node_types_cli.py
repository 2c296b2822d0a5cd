"""The node-type examples and commands through the real ``cyclone-flow`` script: fan-out,
child flows, a wait_signal approval with ``signal``, ``status`` and ``graph --run``, and the
errors of ``signal`` (exit 1 or 2, never a traceback)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psycopg
from helpers.cli import Runner, clean_env, json_output, no_traceback, run_cli
from helpers.paths import EXAMPLES, FLOWS


def test_run_fan_out_example_profiles_every_data_file(cli: Runner) -> None:
    proc = cli("run", FLOWS / "csv_fan_out.yaml", "--import-path", EXAMPLES, "--json")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    status = json_output(proc.stdout)
    assert status["state"] == "completed"
    combined = status["output"]["combine"]
    assert combined["files"] == 2 and combined["rows"] == 1461 + 560
    assert [f["file"] for f in combined["per_file"]] == ["seattle-weather.csv", "stocks.csv"]
    each = next(s for s in status["steps"] if s["node"] == "profile_each")
    assert each["type"] == "fan_out"
    assert each["items"]["total"] == 2 and each["items"]["done"] == 2
    assert each["items"]["states"] == {"completed": 2}


def test_run_child_flow_example_runs_two_child_runs(
    cli: Runner, database_url: str, schema: str
) -> None:
    proc = cli("run", FLOWS / "csv_children.yaml", "--import-path", EXAMPLES)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    output = json_output(proc.stdout)
    assert output["compare"]["larger"] == "seattle-weather.csv"
    assert output["compare"]["rows"] == {"seattle-weather.csv": 1461, "stocks.csv": 560}
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            f'SELECT flow_name, parent_node, state FROM "{schema}".cyclone_runs'
            " ORDER BY parent_node NULLS FIRST"
        ).fetchall()
    assert rows == [
        ("csv-children", None, "completed"),
        ("csv-profile", "stocks", "completed"),
        ("csv-profile", "weather", "completed"),
    ]


def test_approval_example_with_the_signal_command(
    cli: Runner, database_url: str, schema: str
) -> None:
    submitted = cli("submit", FLOWS / "approval.yaml", "--input", '{"year": 2004}')
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    # sent before the run reaches `approve`: kept, then consumed when approve waits
    signal = cli("signal", run_id, "approved", "--payload", '{"by": "ada", "note": "ok"}')
    no_traceback(signal)
    assert signal.returncode == 0, signal.stderr
    assert "kept" in signal.stdout
    status = json_output(cli("status", run_id, "--json").stdout)
    approve = next(s for s in status["steps"] if s["node"] == "approve")
    assert (approve["type"], approve["signal"], approve["state"]) == (
        "wait_signal",
        "approved",
        "pending",
    )
    worker = cli(
        "worker",
        "--allow-module",
        "cyclone_examples",
        "--import-path",
        EXAMPLES,
        "--exit-when-idle",
        "--lease-ttl",
        "2s",
        "--poll-interval",
        "20ms,200ms",
    )
    assert worker.returncode == 0, worker.stderr
    status = json_output(cli("status", run_id, "--json").stdout)
    assert status["state"] == "completed", status
    assert status["output"] == {"publish": {"year": 2004, "approved_by": "ada", "symbols": 5}}
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT approved_by, note, year FROM approved_stock_reports WHERE run_id = %s",
            (run_id,),
        ).fetchone()
    assert row == ("ada", "ok", 2004)
    graph = cli("graph", "--run", run_id)
    assert graph.returncode == 0, graph.stderr
    assert "approve<br/>wait_signal approved<br/>completed: signal 'approved'" in graph.stdout
    assert "    classDef completed fill:#86efac" in graph.stdout  # the dashboard's legend
    dot = cli("graph", "--run", run_id, "--format", "dot")
    assert 'style=filled, fillcolor="#86efac"' in dot.stdout, dot.stdout
    # the run is finished now: another signal is refused
    late = cli("signal", run_id, "approved")
    no_traceback(late)
    assert late.returncode == 1
    assert "is completed" in late.stderr


def test_status_shows_the_awaited_signal_and_signal_errors(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "wait.yaml"
    flow.write_text("name: wait\nnodes:\n  gate: {type: wait_signal, signal: go, max_wait: 1h}\n")
    run_id = cli("submit", flow).stdout.strip()
    status = cli("status", run_id, env=clean_env(COLUMNS="200"))
    assert status.returncode == 0, status.stderr
    assert "awaits signal 'go' until" in status.stdout
    big = tmp_path / "big.json"
    big.write_text(json.dumps("x" * 300_000))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    cases: list[tuple[tuple[str | Path, ...], int, str]] = [
        ((str(uuid.uuid4()), "go"), 1, "not found"),
        (("not-a-uuid", "go"), 1, "not found"),
        ((run_id, "other"), 1, "no wait_signal node of the run waits for it"),
        ((run_id, "go", "--payload", "{nope"), 2, "not valid JSON"),
        ((run_id, "go", "--payload-file", big), 2, "larger than the signal payload limit"),
        ((run_id, "bad name"), 2, "invalid signal name"),
        ((run_id, ""), 2, "invalid signal name"),
        ((run_id, "go", "--payload-file", deep), 2, "nested too deeply"),
    ]
    for args, code, message in cases:
        proc = cli("signal", *args)
        no_traceback(proc)
        assert proc.returncode == code, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
    ok = cli("signal", run_id, "go", "--payload", '{"n": 1}')
    assert ok.returncode == 0, ok.stderr
    assert f"delivered to node gate of run {run_id}" in ok.stdout
    done = json_output(cli("status", run_id, "--json").stdout)
    assert done["state"] == "completed" and done["output"] == {"gate": {"n": 1}}


def test_lint_reports_child_flow_recursion_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: a\nnodes:\n  sub: {type: child, flow: b.yaml}\n")
    (tmp_path / "b.yaml").write_text("name: b\nnodes:\n  sub: {type: child, flow: a.yaml}\n")
    (tmp_path / "c.yaml").write_text("name: c\nnodes:\n  sub: {type: child, flow: gone.yaml}\n")
    proc = run_cli("lint", tmp_path, cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert any(
        line.startswith(f"{tmp_path / 'a.yaml'}:3:28: error[E031]")
        and "a.yaml -> b.yaml -> a.yaml" in line
        for line in lines
    ), lines
    assert any(line.startswith(f"{tmp_path / 'c.yaml'}:3:28: error[E030]") for line in lines)
    graph = run_cli("graph", tmp_path / "c.yaml")
    assert graph.returncode == 1 and "E030" in graph.stderr

"""Acceptance tests of the ``cyclone-flow`` command line: the real console script in a
subprocess against a real Postgres (the test's fresh schema)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.cli import Runner, clean_env, json_output, no_traceback, run_cli
from helpers.paths import EXAMPLES, FLOWS, TEST_HANDLERS

HELLO = FLOWS / "hello.yaml"
WEATHER = FLOWS / "seattle_weather.yaml"

FAILING_FLOW = """\
name: failing
nodes:
  first:
    call: cyclone_test_handlers.basic:echo
  explode:
    call: cyclone_test_handlers.basic:boom
    needs: [first]
"""


def _import_args(command: str) -> list[str]:
    return ["--import-path", str(EXAMPLES)] if command == "run" else []


def _tables_named(conn: psycopg.Connection[Any], table: str) -> list[str]:
    rows = conn.execute(
        "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relname = %s AND c.relkind = 'r'",
        (table,),
    ).fetchall()
    return [r[0] for r in rows]


# --- happy paths -------------------------------------------------------------------------


def test_run_seattle_weather_prints_summary_and_stores_48_months(
    cli: Runner, database_url: str, schema: str
) -> None:
    proc = cli("run", WEATHER, "--import-path", EXAMPLES)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    output = json_output(proc.stdout)
    assert list(output) == ["summary"], output  # the only leaf node
    summary = output["summary"]
    assert summary["months"] == 48
    assert summary["stored_rows"] == 48
    assert summary["first_month"] == "2012-01"
    assert summary["last_month"] == "2015-12"
    run_id = next(line.split()[1] for line in proc.stderr.splitlines() if line.startswith("run "))
    uuid.UUID(run_id)

    # The handler creates an unqualified table on the completion transaction's connection,
    # whose search_path is the server default ("$user", public): the table lands there,
    # not in the cyclone schema given by --schema.
    with psycopg.connect(database_url, autocommit=True) as conn:
        found = _tables_named(conn, "weather_monthly")
        assert found, "weather_monthly was not created anywhere"
        assert schema not in found
        default_schema = conn.execute(
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.oid = to_regclass('weather_monthly')"
        ).fetchone()
        assert default_schema is not None and default_schema[0] in found
        count = conn.execute(
            "SELECT count(*), count(DISTINCT month) FROM weather_monthly WHERE run_id = %s",
            (run_id,),
        ).fetchone()
        assert count == (48, 48)


def test_run_hellojson_output(cli: Runner) -> None:
    proc = cli("run", HELLO, "--import-path", EXAMPLES, "--json", "--input", '{"name": "Ada"}')
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    data = json_output(proc.stdout)
    assert data["state"] == "completed"
    assert data["flow_name"] == "hello"
    assert data["output"]["shout"]["message"] == "HELLO, ADA!"
    assert data["output"]["shout"]["run_id"] == data["id"]
    steps = {s["node"]: s for s in data["steps"]}
    assert set(steps) == {"greet", "shout"}
    assert all(s["state"] == "completed" and s["attempt"] == 1 for s in steps.values())


def test_submit_then_worker_completes_then_status_and_runs(cli: Runner) -> None:
    plain = cli("submit", HELLO, "--input", '{"name": "Bob"}')
    no_traceback(plain)
    assert plain.returncode == 0, plain.stderr
    first = plain.stdout.strip()
    uuid.UUID(first)

    as_json = cli("submit", HELLO, "--json")
    no_traceback(as_json)
    assert as_json.returncode == 0, as_json.stderr
    body = json_output(as_json.stdout)
    assert list(body) == ["run_id", "duplicate"] and body["duplicate"] is False
    second = body["run_id"]
    uuid.UUID(second)
    assert second != first

    pending = cli("status", first, "--json")
    assert pending.returncode == 0, pending.stderr
    assert json_output(pending.stdout)["state"] == "running"

    worker = cli(
        "worker",
        "--exit-when-idle",
        "--allow-module",
        "cyclone_examples",
        "--import-path",
        EXAMPLES,
        "--workers",
        "2",
        "--lease-ttl",
        "5s",
        "--poll-interval",
        "20ms,200ms",
    )
    no_traceback(worker)
    assert worker.returncode == 0, worker.stderr

    for run_id, name in ((first, "Bob"), (second, "world")):
        status = cli("status", run_id, "--json")
        no_traceback(status)
        assert status.returncode == 0, status.stderr
        data = json_output(status.stdout)
        assert data["id"] == run_id
        assert data["state"] == "completed", data
        assert data["output"]["shout"]["message"] == f"HELLO, {name.upper()}!"
        assert [s["node"] for s in sorted(data["steps"], key=lambda s: s["node"])] == [
            "greet",
            "shout",
        ]
        for step in data["steps"]:
            assert step["state"] == "completed"
            assert step["attempt"] == 1
            assert step["reclaims"] == 0
            assert "max_attempts" in step and "error" in step

    text_status = cli("status", first)
    no_traceback(text_status)
    assert text_status.returncode == 0
    assert "completed" in text_status.stdout and "greet" in text_status.stdout

    runs = cli("runs", "--json")
    no_traceback(runs)
    assert runs.returncode == 0, runs.stderr
    listed = json_output(runs.stdout)
    assert {r["id"] for r in listed} == {first, second}
    assert all(r["state"] == "completed" and r["flow_name"] == "hello" for r in listed)

    only_failed = cli("runs", "--json", "--state", "failed")
    assert only_failed.returncode == 0
    assert json_output(only_failed.stdout) == []


def test_failing_flow_run_exits_1(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "failing.yaml"
    flow.write_text(FAILING_FLOW)
    proc = cli("run", flow, "--import-path", TEST_HANDLERS, "--input", '{"x": 1}')
    no_traceback(proc)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "failed" in proc.stderr
    assert "boom" in proc.stderr

    as_json = cli("run", flow, "--import-path", TEST_HANDLERS, "--json")
    assert as_json.returncode == 1
    data = json_output(as_json.stdout)
    assert data["state"] == "failed"
    steps = {s["node"]: s for s in data["steps"]}
    assert steps["first"]["state"] == "completed"
    assert steps["explode"]["state"] == "discarded"
    assert "boom" in (steps["explode"]["error"] or "")


# --- bad inputs --------------------------------------------------------------------------


def test_lint_missing_file_exits_2(tmp_path: Path) -> None:
    proc = run_cli("lint", tmp_path / "nope.yaml")
    no_traceback(proc)
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr


@pytest.mark.parametrize("command", ["run", "submit"])
def test_missing_flow_file_is_a_clear_error(cli: Runner, tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nope.yaml"
    proc = cli(command, missing)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr  # a usage error, as for lint
    assert "nope.yaml" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("command", ["run", "submit"])
def test_invalid_input_json_exits_2(cli: Runner, command: str) -> None:
    proc = cli(command, HELLO, *_import_args(command), "--input", "{not json")
    no_traceback(proc)
    assert proc.returncode == 2
    assert "not valid JSON" in proc.stderr


@pytest.mark.parametrize("command", ["run", "submit"])
def test_input_violating_input_schema_exits_1(cli: Runner, command: str) -> None:
    proc = cli(command, HELLO, *_import_args(command), "--input", '{"name": 42}')
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    assert "input of flow 'hello' is invalid" in proc.stderr
    assert "name" in proc.stderr
    assert proc.stdout == ""


def test_input_schema_additional_property_is_named(
    cli: Runner, database_url: str, schema: str
) -> None:
    proc = cli("submit", HELLO, "--input", '{"nmae": "typo"}')
    no_traceback(proc)
    assert proc.returncode == 1
    assert "nmae" in proc.stderr
    with psycopg.connect(database_url, autocommit=True) as conn:
        runs = conn.execute(f'SELECT count(*) FROM "{schema}".cyclone_runs').fetchone()
    assert runs == (0,), "an invalid input must write nothing"


def test_status_of_unknown_run_exits_1(cli: Runner) -> None:
    unknown = str(uuid.uuid4())
    proc = cli("status", unknown)
    no_traceback(proc)
    assert proc.returncode == 1
    assert f"run {unknown} not found" in proc.stderr


@pytest.mark.parametrize("garbage", ["xyz", "1234", "' OR 1=1 --"])
def test_status_of_garbage_run_id_exits_1(cli: Runner, garbage: str) -> None:
    proc = cli("status", garbage, "--json")
    no_traceback(proc)
    assert proc.returncode == 1
    assert "not found" in proc.stderr
    assert proc.stdout == ""


def test_worker_without_allow_module_exits_2(cli: Runner) -> None:
    proc = cli("worker", "--exit-when-idle")
    no_traceback(proc)
    assert proc.returncode == 2
    assert "--allow-module" in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["migrate"],
        ["submit", str(HELLO)],
        ["run", str(HELLO), "--import-path", str(EXAMPLES)],
        ["status", str(uuid.UUID(int=1))],
        ["runs"],
        ["worker", "--allow-module", "cyclone_examples", "--exit-when-idle"],
    ],
    ids=lambda a: a[0],
)
def test_unreachable_database_is_one_line_exit_1(args: list[str]) -> None:
    proc = run_cli(
        *args, "--database-url", "postgresql://nobody@127.0.0.1:1/x", "--schema", "s", timeout=60
    )
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "cannot use the database" in errors[0]
    # the "using database" notice plus the one error line, nothing else
    assert len(proc.stderr.strip().splitlines()) <= 2, proc.stderr


def test_submit_to_unmigrated_schema_says_run_migrate(database_url: str) -> None:
    schema = f"unmigrated_{uuid.uuid4().hex[:10]}"
    proc = run_cli("submit", HELLO, "--database-url", database_url, "--schema", schema)
    no_traceback(proc)
    assert proc.returncode == 1
    assert "cyclone-flow migrate" in proc.stderr


# --- the embedded default (starts a second Postgres: this and test_embedded_cli.py only) ---


@pytest.mark.db  # starts the embedded Postgres itself
def test_embedded_default_under_cyclone_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = clean_env(CYCLONE_HOME=str(home))
    proc = run_cli(
        "run", HELLO, "--import-path", EXAMPLES, "--json", cwd=workdir, env=env, timeout=240
    )
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert f"embedded Postgres in {home}" in proc.stderr
    assert json_output(proc.stdout)["output"]["shout"]["message"] == "HELLO, WORLD!"
    assert (home / "pgdata").is_dir()
    assert not (workdir / ".cyclone").exists(), "CYCLONE_HOME must move .cyclone"

    # a second process joins the same data folder and sees the first run
    runs = run_cli("runs", "--json", cwd=workdir, env=env, timeout=240)
    no_traceback(runs)
    assert runs.returncode == 0, runs.stderr
    assert [r["flow_name"] for r in json_output(runs.stdout)] == ["hello"]


@pytest.mark.parametrize(
    "args",
    [["migrate"], ["submit", str(HELLO)], ["status", str(uuid.UUID(int=1))], ["runs"]],
    ids=lambda a: a[0],
)
def test_invalid_schema_name_exits_2(database_url: str, args: list[str]) -> None:
    proc = run_cli(*args, "--database-url", database_url, "--schema", "Bad-Name")
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert "invalid schema name 'Bad-Name'" in proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["submit", str(HELLO), "--input-file", "/nonexistent/input.json"], "--input-file"),
        (["submit", str(HELLO), "--input", "{}", "--input-file", "/x.json"], "not both"),
        (["worker", "--allow-module", "x", "--lease-ttl", "0s"], "--lease-ttl"),
        (["worker", "--allow-module", "x", "--lease-ttl", "soon"], "--lease-ttl"),
        (["runs", "--state", "sleeping"], "--state"),
    ],
    ids=["input-file", "input-both", "ttl-zero", "ttl-garbage", "runs-state"],
)
def test_usage_mistakes_exit_2(cli: Runner, args: list[str], needle: str) -> None:
    proc = cli(*args)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr


def test_queues_on_the_command_line(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "queued.yaml"
    flow.write_text(
        "name: queued\n"
        "nodes:\n"
        "  a: {call: 'cyclone_test_handlers.basic:add', input: {a: 1, b: 2}, queue: gpu}\n"
        "  b: {call: 'cyclone_test_handlers.basic:echo', needs: [a],"
        " input: '${{ nodes.a.output }}'}\n",
        encoding="utf-8",
    )
    handlers = TEST_HANDLERS
    # run serves every queue its flow names
    ran = cli("run", flow, "--import-path", handlers, "--json")
    no_traceback(ran)
    assert ran.returncode == 0, ran.stderr
    assert json_output(ran.stdout)["output"] == {"b": {"sum": 3}}
    # a worker serves only the queues it is given
    run_id = cli("submit", flow).stdout.strip()
    args = (
        "--exit-when-idle",
        "--allow-module",
        "cyclone_test_handlers",
        "--poll-interval",
        "20ms,200ms",
    )
    default_only = cli("worker", *args, "--import-path", handlers, "--queue", "default=1")
    assert default_only.returncode == 0, default_only.stderr
    assert json_output(cli("status", run_id, "--json").stdout)["steps"][0]["state"] == "available"
    both = cli("worker", *args, "--import-path", handlers, "--queue", "gpu=1", "--queue", "default")
    assert both.returncode == 0, both.stderr
    assert json_output(cli("status", run_id, "--json").stdout)["state"] == "completed"
    bad = cli("worker", *args, "--queue", "Bad Queue=2")
    no_traceback(bad)
    assert bad.returncode == 2 and "invalid queue name" in bad.stderr

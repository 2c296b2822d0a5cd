"""Hostile flow text and arguments through the real `cyclone-flow` script: a lint
problem with its position, or an `error:` line with exit 1 or 2, never a traceback
nor a database error for a string the database cannot take."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import Runner, no_traceback, run_cli
from helpers.http import counting_server

NODE = "  a: {call: 'cyclone_test_handlers.basic:echo'}\n"
LONG_ZONE = "name: zone\nnodes:\n" + NODE + "schedules:\n  - {cron: '0 * * * *', timezone: %s}\n"
HOSTILE_FLOWS = {
    # finding: OSError (File name too long) from zoneinfo
    "long_timezone": (LONG_ZONE % ("A" * 300), "E051", 5),
    # finding: ValueError (embedded null byte) from the child flow lookup
    "nul_child_path": ('name: nul\nnodes:\n  sub: {type: child, flow: "x\\0y.yaml"}\n', "E008", 3),
    # finding: "no problems found", then submit failed in the database
    "nul_escape": ('name: nul\nnodes:\n  a: {call: "m:f", input: {x: "a\\0b"}}\n', "E008", 3),
    "surrogate_escape": ('name: sur\ndescription: "\\ud800"\nnodes:\n' + NODE, "E008", 2),
    # item 3: a denormal backoff linted clean and overflowed at the first failure
    "tiny_backoff": (
        "name: tiny\nnodes:\n  a: {call: 'm:f', retry: {max_attempts: 3, "
        "backoff: {initial: 1.0e-320, max: 5m}}}\n",
        "E007",
        3,
    ),
}


def _flow(tmp_path: Path, key: str) -> tuple[Path, str, int]:
    text, code, line = HOSTILE_FLOWS[key]
    path = tmp_path / f"{key}.yaml"
    path.write_text(text, "utf-8")
    return path, code, line


def _error(proc: Any, code: int) -> str:
    no_traceback(proc)
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    return str(proc.stderr)


@pytest.mark.parametrize("key", sorted(HOSTILE_FLOWS))
def test_lint_reports_hostile_text_with_its_position(tmp_path: Path, key: str) -> None:
    path, code, line = _flow(tmp_path, key)
    proc = run_cli("lint", path)
    no_traceback(proc)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert f"{path}:{line}:" in proc.stdout and f"error[{code}]" in proc.stdout, proc.stdout
    out = json.loads(run_cli("lint", "--format", "json", path).stdout)
    assert [(p["code"], p["line"]) for p in out] == [(code, line)]


@pytest.mark.parametrize("key", ["long_timezone", "nul_child_path", "nul_escape"])
def test_submit_refuses_hostile_flow_text_before_the_database(
    cli: Runner, tmp_path: Path, key: str
) -> None:
    path, code, line = _flow(tmp_path, key)
    stderr = _error(cli("submit", path), 1)
    assert f"{path}:{line}:" in stderr and f"error[{code}]" in stderr, stderr
    assert "cannot use the database" not in stderr


@pytest.mark.parametrize(
    ("args", "exit_code", "needle"),
    [
        (["--timezone", "A" * 300], 2, "error: timezone="),
        (["--timezone", "Europe/" + "x" * 5000], 2, "error: timezone="),
        (["--timezone", "\udcff"], 2, "error: timezone="),  # the byte 0xff in argv
        (["--name", "nightly\n"], 2, "error: name="),
        (["--input", '{"a": "\\ud800"}'], 1, "lone surrogate (U+D800)"),
        (["--input", '["\\u0000"]'], 1, "NUL character"),
    ],
)
def test_schedule_add_refuses_hostile_options(
    cli: Runner, tmp_path: Path, args: list[str], exit_code: int, needle: str
) -> None:
    flow = tmp_path / "ok.yaml"
    flow.write_text("name: ok\nnodes:\n" + NODE, "utf-8")
    stderr = _error(cli("schedule", "add", flow, "--cron", "0 * * * *", *args), exit_code)
    assert needle in stderr, stderr
    assert "cannot use the database" not in stderr
    assert json.loads(cli("schedule", "list", "--json").stdout) == []


@pytest.mark.parametrize(
    ("args", "exit_code", "needle"),
    [
        (["--input", '{"a": "\\ud800"}'], 1, "lone surrogate (U+D800)"),
        (["--unique-key", "k\udcff"], 2, "error: unique_key="),  # the byte 0xff in argv
        (["--sequence", "\udcfe"], 2, "error: sequence="),
        (["--unique-key", "\U0001f600" * 1000], 2, "at most 2000 bytes"),
        (["--queue", "default\n"], 2, "error: queue="),
        (["--delay", "0.1ms"], 2, "0 or at least 1ms"),
    ],
)
def test_submit_and_enqueue_refuse_hostile_options(
    cli: Runner, tmp_path: Path, args: list[str], exit_code: int, needle: str
) -> None:
    flow = tmp_path / "ok.yaml"
    flow.write_text("name: ok\nnodes:\n" + NODE, "utf-8")
    for command in (["submit", flow], ["enqueue", "cyclone_test_handlers.basic:echo"]):
        if command[0] == "enqueue" and args[0] == "--input":
            args = ["--args", args[1]]
        stderr = _error(cli(*command, *args), exit_code)
        assert needle in stderr, stderr
        assert "cannot use the database" not in stderr
    assert json.loads(cli("runs", "--json").stdout) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--timeout", "0.5ms"], "at least 1ms"),
        (["--args", '"\\udfff"'], "lone surrogate (U+DFFF)"),
        (["cyclone_test_handlers.basic:echo\n"], "error: callable="),
    ],
)
def test_enqueue_refuses_hostile_job(cli: Runner, args: list[str], needle: str) -> None:
    call = [] if args[0].startswith("cyclone") else ["cyclone_test_handlers.basic:echo"]
    stderr = _error(cli("enqueue", *call, *args), 1 if "surrogate" in needle else 2)
    assert needle in stderr, stderr


def test_signal_refuses_an_unstorable_payload(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "waits.yaml"
    flow.write_text("name: waits\nnodes:\n  w: {type: wait_signal, signal: go}\n", "utf-8")
    submitted = cli("submit", flow)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    for payload, needle in (('"\\ud800"', "lone surrogate"), ('{"k\\u0000": 1}', "NUL")):
        stderr = _error(cli("signal", run_id, "go", "--payload", payload), 1)
        assert needle in stderr and "error: payload of signal 'go': contains" in stderr, stderr
        assert "input of flow" not in stderr  # about the signal, not the input


@pytest.mark.parametrize(
    ("args", "exit_code", "needle"),
    [
        (["runs", "--flow", "\udcff", "--json"], 0, "[]"),
        (["retry", "--all-failed", "--flow", "\udcff"], 0, "retried 0 failed run(s)"),
        (["schedule", "remove", "\udcff"], 1, "error: schedule '\\udcff' not found"),
        (["schedule", "pause", "x\udcfe"], 1, "error: schedule 'x\\udcfe' not found"),
        (["schedule", "resume", "\udcff"], 1, "error: schedule '\\udcff' not found"),
    ],
)
def test_lookups_by_an_unencodable_name_find_nothing(
    cli: Runner, args: list[str], exit_code: int, needle: str
) -> None:
    """Names from argv that are not UTF-8 (Python decodes them to lone surrogates) used to
    raise UnicodeEncodeError on their way to the database."""
    proc = cli(*args)
    no_traceback(proc)
    assert proc.returncode == exit_code, (proc.stdout, proc.stderr)
    assert needle in proc.stdout + proc.stderr


# -- remote refs, payload files, scalar positions, long run ids --------------------------


def test_lint_and_submit_fetch_no_remote_ref_of_an_input_schema(
    cli: Runner, tmp_path: Path
) -> None:
    with counting_server() as server:
        flow = tmp_path / "refs.yaml"
        flow.write_text(
            f'name: refs\ninput_schema: {{$ref: "{server.url}/x.json"}}\nnodes:\n' + NODE,
            "utf-8",
        )
        lint = run_cli("lint", flow)
        submit = cli("submit", flow, "--input", '"x"')
    assert server.requests == []
    for proc in (lint, submit):
        no_traceback(proc)
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        assert f"{flow}:2:" in proc.stdout + proc.stderr
        assert "error[E006]" in proc.stdout + proc.stderr


@pytest.mark.parametrize("source", ["device", "file"])
def test_input_and_payload_files_are_read_up_to_their_payload_limit(
    cli: Runner, tmp_path: Path, source: str
) -> None:
    """`--payload-file /dev/zero` grew to 6.3 GB, `--input-file /dev/zero` hung: at most
    the limit + 1 byte is read, and a larger file is a usage error naming the limit."""
    big = tmp_path / "big.json"
    big.write_text('"' + "x" * (2 * 1024 * 1024) + '"', "utf-8")
    path = "/dev/zero" if source == "device" else str(big)
    flow = tmp_path / "ok.yaml"
    flow.write_text("name: ok\nnodes:\n" + NODE, "utf-8")
    run_id = "0190a5a4-0000-7000-8000-000000000000"
    for args, needle in (
        (["submit", flow, "--input-file", path], "input payload limit of 1048576 bytes"),
        (["run", flow, "--input-file", path], "input payload limit of 1048576 bytes"),
        (["signal", run_id, "go", "--payload-file", path], "signal payload limit of 262144"),
    ):
        stderr = _error(cli(*args, timeout=60), 2)
        assert needle in stderr and path in stderr, stderr
    assert json.loads(cli("runs", "--json").stdout) == []


def test_a_payload_file_at_the_limit_is_sent(cli: Runner, tmp_path: Path) -> None:
    at_limit = tmp_path / "at.json"
    at_limit.write_text('"' + "x" * (256 * 1024 - 2) + '"', "utf-8")  # 262144 bytes
    run_id = "0190a5a4-0000-7000-8000-000000000000"
    stderr = _error(cli("signal", run_id, "go", "--payload-file", at_limit), 1)
    assert f"run {run_id} not found" in stderr, stderr  # read, sent, no such run


@pytest.mark.parametrize(
    ("value", "code", "col"),
    [
        ('{k: "\\U0010FFFF\\UFFFFFFFF"}', "E001", 25),  # was 1:1 "Python int too large ..."
        ('!!int "0x_"', "E004", 8),  # was 1:1 "string index out of range"
        ('!!timestamp "2001-99-99"', "E004", 8),  # was 1:1 "month must be in 1..12"
    ],
)
def test_lint_graph_and_submit_report_a_bad_scalar_at_its_position(
    cli: Runner, tmp_path: Path, value: str, code: str, col: int
) -> None:
    flow = tmp_path / "bad.yaml"
    flow.write_text(f"name: bad\nnodes:\n{NODE}input: {value}\n", "utf-8")
    for proc in (run_cli("lint", flow), run_cli("graph", flow), cli("submit", flow)):
        no_traceback(proc)
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        assert f"{flow}:4:{col}: error[{code}]" in proc.stdout + proc.stderr
        assert "cannot parse YAML" not in proc.stdout + proc.stderr


def test_a_long_run_id_is_shortened_in_not_found(cli: Runner) -> None:
    stderr = _error(cli("status", "r" * 10_000), 1)
    assert "error: run 'rrr" in stderr and "more characters) not found" in stderr, stderr
    assert len(stderr) < 1000


@pytest.mark.parametrize("spec", ["q=abc", "q=1.5", "q=", "q=0"])
def test_worker_queue_count_that_is_no_whole_number_names_what_is_wanted(spec: str) -> None:
    # not Python's "invalid literal for int() with base 10: 'abc'" for 'q=abc'
    proc = run_cli("worker", "--queue", spec, "--allow-module", "x", "--database-url", "x")
    stderr = _error(proc, 2)
    assert "whole number >= 1" in stderr, stderr
    assert "invalid literal" not in stderr

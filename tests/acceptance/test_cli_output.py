"""The command line reads well everywhere ("CLI output"): durations written as a
bare number of seconds, full values and ISO 8601 timestamps in a pipe, short run ids, one
``error:`` prefix, ``--version``, empty lists and plain progress. Every test runs the real
``cyclone-flow`` script in a subprocess (stdout a pipe, not a terminal)."""

from __future__ import annotations

import re
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

from helpers.cli import WORKER, Runner, json_output, no_traceback, run_cli
from helpers.paths import TEST_HANDLERS

NOOP = "cyclone_test_handlers.queueing:noop"


def _flow(tmp_path: Path, name: str = "later") -> Path:
    flow = tmp_path / f"{name}.yaml"
    flow.write_text(f"name: {name}\nnodes:\n  a: {{call: '{NOOP}'}}\n")
    return flow


def _ok(proc: Any) -> Any:
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_a_bare_number_is_seconds_in_every_duration_option(
    cli: Runner, tmp_path: Path, db: Any
) -> None:
    flow = _flow(tmp_path)
    # the worker first: with --exit-when-idle it would wait for the delayed runs below
    _ok(cli(*WORKER, "--lease-ttl", "30", "--shutdown-timeout", "5", "--poll-interval", "1"))
    delayed = json_output(_ok(cli("submit", flow, "--delay", "30", "--json")).stdout)
    (wait_s,) = db.execute(
        "SELECT extract(epoch FROM min(s.scheduled_at) - r.created_at)::float8 "
        "FROM cyclone_steps s JOIN cyclone_runs r ON r.id = s.run_id WHERE r.id = %s "
        "GROUP BY r.created_at",
        (delayed["run_id"],),
    ).fetchone()
    assert 29 <= wait_s <= 31
    _ok(cli("submit", flow, "--delay", "0"))  # 0 is valid for --delay: no wait
    _ok(cli("submit", flow, "--delay", "1.5"))
    keyed = cli("submit", flow, "--unique-key", "k", "--unique-window", "60")
    _ok(keyed)
    job = json_output(_ok(cli("enqueue", NOOP, "--timeout", "30", "--json")).stdout)
    (timeout_s,) = db.execute(
        "SELECT extract(epoch FROM timeout)::float8 FROM cyclone_steps WHERE run_id = %s",
        (job["run_id"],),
    ).fetchone()
    assert timeout_s == 30
    purge = json_output(_ok(cli("purge", "--older-than", "2", "--dry-run", "--json")).stdout)
    assert purge["older_than_s"] == 2
    # 0 where a duration must be positive, and a negative or malformed number: exit 2
    for args in (
        ("enqueue", NOOP, "--timeout", "0"),
        ("submit", flow, "--unique-key", "k", "--unique-window", "0"),
        ("submit", flow, "--delay", "-1"),
        ("purge", "--older-than", "1e3"),
    ):
        bad = cli(*args)
        no_traceback(bad)
        assert bad.returncode == 2, (args, bad.stderr)
        assert args[-2] in bad.stderr, bad.stderr


ISO_INSTANT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00$")


def _instants(value: Any) -> list[str]:
    """Every string value of ``value`` (nested) that looks like a timestamp."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in _instants(v)]
    if isinstance(value, list):
        return [t for v in value for t in _instants(v)]
    return [value] if isinstance(value, str) and re.match(r"^\d{4}-\d\d-\d\d", value) else []


def test_tables_print_full_values_in_a_pipe_and_json_has_iso_instants(
    cli: Runner, tmp_path: Path
) -> None:
    name = "orders-" + "x" * 90  # 97 characters: cut at 80 columns before
    node = "charge_the_customer_" + "y" * 100
    flow = tmp_path / "long.yaml"
    flow.write_text(
        f"name: {name}\nnodes:\n  {node}: {{call: '{NOOP}'}}\n"
        f"schedules:\n  - {{name: {name}-nightly, cron: '0 3 * * *', timezone: Europe/Paris}}\n"
    )
    run_id = json_output(_ok(cli("submit", flow, "--json")).stdout)["run_id"]
    runs = _ok(cli("runs")).stdout
    assert name in runs and run_id in runs and "…" not in runs, runs
    status = _ok(cli("status", run_id)).stdout
    assert name in status and node in status and "…" not in status, status
    _ok(cli("schedule", "sync", flow))
    schedules = _ok(cli("schedule", "list")).stdout
    assert f"{name}-nightly" in schedules and "Europe/Paris" in schedules, schedules
    assert "…" not in schedules, schedules
    _ok(cli(*WORKER))
    for args in (
        ("runs", "--json"),
        ("status", run_id, "--json"),
        ("schedule", "list", "--json"),
    ):
        instants = _instants(json_output(_ok(cli(*args)).stdout))
        assert instants, args
        for instant in instants:
            assert ISO_INSTANT.match(instant), (args, instant)


def test_every_run_id_argument_takes_a_short_prefix(cli: Runner, tmp_path: Path, db: Any) -> None:
    flow = tmp_path / "gate.yaml"
    flow.write_text(
        "name: gate\nnodes:\n"
        "  a: {call: 'cyclone_test_handlers.basic:echo'}\n"
        "  gate: {type: wait_signal, signal: go, needs: [a]}\n"
    )
    run_id = json_output(_ok(cli("submit", flow, "--input", "{}", "--json")).stdout)["run_id"]
    short = run_id[:8]  # as the progress bar of `run` shows it
    assert json_output(_ok(cli("status", short, "--json")).stdout)["id"] == run_id
    assert run_id in _ok(cli("status", short)).stdout
    _ok(cli("logs", short))
    assert "gate" in _ok(cli("graph", "--run", short)).stdout
    _ok(cli("signal", short, "go"))
    assert _ok(cli("cancel", short)).stdout.strip() == f"run {run_id} cancelled"
    assert run_id in _ok(cli("retry", short)).stdout
    # two runs whose ids start the same: the prefix is ambiguous, exit 1 with both ids
    twin = run_id[:8] + "-0000-4000-8000-000000000000"
    db.execute(
        "INSERT INTO cyclone_runs SELECT (jsonb_populate_record(NULL::cyclone_runs,"
        " to_jsonb(r) || jsonb_build_object('id', %s::text))).* FROM cyclone_runs r"
        " WHERE r.id = %s",
        (twin, run_id),
    )
    for args in (("status", short), ("cancel", short), ("logs", short)):
        both = cli(*args)
        no_traceback(both)
        assert both.returncode == 1, both.stderr
        assert "ambiguous" in both.stderr and run_id in both.stderr and twin in both.stderr
    gone = cli("status", "0123456789" if not run_id.startswith("0123") else "fedcba98")
    assert gone.returncode == 1 and "not found" in gone.stderr, gone.stderr


def test_usage_mistakes_print_the_same_error_prefix_and_exit_2(cli: Runner, tmp_path: Path) -> None:
    flow = _flow(tmp_path)
    for args in (
        ("submit", flow, "--delay", "soon"),  # click's BadParameter
        ("submit", tmp_path / "missing.yaml"),  # click's own path check
        ("status",),  # a missing argument
        ("status", "x", "--nope"),  # an unknown option
        ("retry",),  # ours: a UsageError raised by the command
    ):
        proc = cli(*args)
        no_traceback(proc)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Error:" not in proc.stderr, proc.stderr
        assert proc.stderr.rstrip().splitlines()[-1].startswith("error: "), proc.stderr
    unknown = run_cli("nope")
    assert unknown.returncode == 2 and "error: no such command 'nope'" in unknown.stderr
    ours = cli("status", "0000000000000000")  # an error of ours: exit 1, the same prefix
    assert ours.returncode == 1 and "error: run 0000000000000000 not found" in ours.stderr


def test_version_empty_lists_and_the_migrate_hint(cli: Runner, database_url: str) -> None:
    version = run_cli("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"cyclone-flow {metadata.version('cyclone-flow')}"
    assert _ok(cli("runs")).stdout.strip() == "no runs"
    assert _ok(cli("schedule", "list")).stdout.strip() == "no schedules"
    assert json_output(_ok(cli("runs", "--json")).stdout) == []
    bare = f"unmigrated_{uuid.uuid4().hex[:8]}"
    proc = run_cli("runs", "--database-url", database_url, "--schema", bare)
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    assert f"run `cyclone-flow migrate --schema {bare}` first" in proc.stderr, proc.stderr


PLAIN_FLOW = """
name: plain
nodes:
  a: {call: 'cyclone_test_handlers.basic:echo'}
  flaky:
    call: cyclone_test_handlers.ops:flaky
    needs: [a]
    input: {succeed_on: 3}
    retry: {max_attempts: 3, backoff: {initial: 0s}}
  price:
    type: fan_out
    needs: [flaky]
    over: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    call: cyclone_test_handlers.basic:echo
  summary: {call: 'cyclone_test_handlers.basic:echo', needs: [price]}
"""


def test_plain_progress_is_causal_reports_every_failed_attempt_and_sums_up_items(
    cli: Runner, tmp_path: Path
) -> None:
    flow = tmp_path / "plain.yaml"
    flow.write_text(PLAIN_FLOW)
    proc = cli("run", flow, "--import-path", TEST_HANDLERS)  # stderr is a pipe: plain lines
    _ok(proc)
    lines = [line.strip() for line in proc.stderr.splitlines() if line.startswith("  step ")]
    # both failed attempts of flaky, retried at once (no backoff) between two polls
    assert "step flaky attempt 1 failed: RuntimeError: flaky attempt 1" in lines, lines
    assert "step flaky attempt 2 failed: RuntimeError: flaky attempt 2" in lines, lines
    expected_order = [
        "step a completed",
        "step flaky attempt 1 failed: RuntimeError: flaky attempt 1",
        "step flaky attempt 2 failed: RuntimeError: flaky attempt 2",
        "step flaky completed",
        "step price: 12/12 items completed",
        "step price completed",
        "step summary completed",
    ]
    assert [line for line in lines if line in expected_order] == expected_order, lines
    # no line per item: at most a summary every few seconds, and the last one
    item_lines = [line for line in lines if line.startswith("step price")]
    assert not any("price[" in line for line in lines), lines
    assert len(item_lines) <= 4, item_lines


def test_status_shows_durations_the_output_and_a_discarded_steps_traceback(
    cli: Runner, tmp_path: Path
) -> None:
    """`status` shows how long each step took, the run's output, and
    the traceback of a step that failed for good (not only its first line)."""
    good = tmp_path / "good.yaml"
    good.write_text(
        "name: good\nnodes:\n  a:\n    call: cyclone_test_handlers.basic:echo\n"
        "    input: {answer: 42}\n"
    )
    run_id = _ok(cli("submit", good)).stdout.strip()
    _ok(cli(*WORKER))
    shown = _ok(cli("status", run_id)).stdout
    header = next(line for line in shown.splitlines() if "node" in line and "state" in line)
    assert "took" in header, shown
    row = next(line for line in shown.splitlines() if re.search(r"\ba\b.*completed", line))
    assert re.search(r"\d+ ms|\d+\.\d s", row), row  # e.g. 3 ms (the dashboard's style)
    assert "output:" in shown, shown
    assert '"answer": 42' in shown, shown

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes:\n  b: {call: 'cyclone_test_handlers.basic:boom'}\n")
    run_id = _ok(cli("submit", bad)).stdout.strip()
    _ok(cli(*WORKER))
    proc = cli("status", run_id)
    _ok(proc)  # no traceback of the CLI's own
    text = proc.stdout  # the handler's traceback, from its step logs, indented
    assert "discarded" in text, text
    assert "\n    Traceback (most recent call last)" in text, text
    assert 'raise RuntimeError("boom")' in text, text
    assert "output:" not in text, text


def test_a_clean_run_ends_without_pool_noise(cli: Runner, tmp_path: Path) -> None:
    """`run` (and `submit --wait`) stop their listener at the end: the pool must not warn
    about the connection the listener closed on purpose."""
    flow = _flow(tmp_path, "quiet")
    proc = _ok(cli("run", flow, "--import-path", TEST_HANDLERS))
    assert "discarding closed connection" not in proc.stderr, proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr

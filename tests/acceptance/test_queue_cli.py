"""The queue features from the real command line: submit options, enqueue, schedule."""

from __future__ import annotations

from pathlib import Path

from helpers.cli import Runner, json_output, no_traceback
from helpers.paths import TEST_HANDLERS

HANDLERS = TEST_HANDLERS
NOOP = "cyclone_test_handlers.queueing:noop"
WORKER = (
    "worker",
    "--exit-when-idle",
    "--allow-module",
    "cyclone_test_handlers",
    "--import-path",
    str(HANDLERS),
    "--poll-interval",
    "20ms,200ms",
)


def test_enqueue_with_options_then_worker_then_status(cli: Runner) -> None:
    first = cli(
        "enqueue",
        NOOP,
        "--args",
        '{"n": 1}',
        "--unique-key",
        "n1",
        "--retry",
        "3",
        "--timeout",
        "30s",
        "--priority",
        "2",
        "--json",
    )
    no_traceback(first)
    assert first.returncode == 0, first.stderr
    job = json_output(first.stdout)
    assert job["duplicate"] is False
    dup = cli("enqueue", NOOP, "--args", '{"n": 1}', "--unique-key", "n1")
    assert dup.returncode == 0 and dup.stdout.strip() == job["run_id"]
    assert "duplicate" in dup.stderr
    worked = cli(*WORKER)
    assert worked.returncode == 0, worked.stderr
    status = json_output(cli("status", job["run_id"], "--json").stdout)
    assert status["state"] == "completed" and status["output"] == {"job": {"n": 1}}
    assert status["flow_name"] == NOOP
    assert status["steps"][0]["max_attempts"] == 3
    assert status["queue_features"]["unique_key"] == "n1"
    assert not status["queue_features"]["unique_held"]  # completed: the key is free


def test_delayed_submit_and_enqueue_wait(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "later.yaml"
    flow.write_text("name: later\nnodes:\n  a: {call: 'cyclone_test_handlers.queueing:noop'}\n")
    later = cli("submit", flow, "--delay", "1h", "--queue", "slow", "--json")
    assert later.returncode == 0, later.stderr
    run_id = json_output(later.stdout)["run_id"]
    steps = json_output(cli("status", run_id, "--json").stdout)["steps"]
    assert steps[0]["queue"] == "slow"
    at = cli("submit", flow, "--run-at", "2999-01-01T00:00:00+01:00")
    assert at.returncode == 0, at.stderr
    assert json_output(cli("status", run_id, "--json").stdout)["steps"][0]["state"] == "available"


def test_queue_option_mistakes_exit_2(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "f.yaml"
    flow.write_text("name: f\nnodes:\n  a: {call: 'm:f'}\n")
    for args, needle in [
        (("submit", flow, "--queue", "Bad Queue"), "queue="),
        (("submit", flow, "--delay", "1s", "--run-at", "2030-01-01T00:00:00Z"), "not both"),
        (("submit", flow, "--run-at", "2030-01-01T00:00:00"), "no UTC offset"),
        (("submit", flow, "--delay", "soon"), "--delay"),
        (("enqueue", "not-a-callable"), "callable="),
        (("submit", flow, "--unique-key", "k", "--unique-states", "done"), "unknown run state"),
        (("enqueue", NOOP, "--args", "{nope"), "not valid JSON"),
        (("schedule", "add", flow, "--cron", "61 * * * *"), "cron="),
        (("schedule", "pause", "ghost"), "schedule 'ghost' not found"),
    ]:
        proc = cli(*args)
        no_traceback(proc)
        assert proc.returncode in (1, 2), (args, proc.stderr)
        assert needle in proc.stderr, (args, proc.stderr)


def test_schedule_commands(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "report.yaml"
    flow.write_text(
        "name: report\n"
        "nodes:\n  a: {call: 'cyclone_test_handlers.queueing:noop'}\n"
        "schedules:\n"
        "  - {name: report-hourly, cron: '0 * * * *', timezone: Europe/Paris}\n"
        "  - {name: report-daily, cron: '@daily', input: {full: true}}\n"
    )
    synced = cli("schedule", "sync", flow)
    assert synced.returncode == 0, synced.stderr
    assert "added report-hourly, report-daily" in synced.stdout
    added = cli("schedule", "add", flow, "--cron", "*/5 * * * *", "--name", "adhoc")
    assert added.returncode == 0 and "schedule adhoc: next run at" in added.stdout
    assert cli("schedule", "pause", "adhoc").stdout.strip() == "schedule adhoc paused"
    listed = json_output(cli("schedule", "list", "--json").stdout)
    assert [(s["name"], s["source"], s["paused"]) for s in listed] == [
        ("adhoc", "manual", True),
        ("report-daily", "flow", False),
        ("report-hourly", "flow", False),
    ]
    assert cli("schedule", "resume", "adhoc").returncode == 0
    assert cli("schedule", "remove", "adhoc").stdout.strip() == "schedule adhoc removed"
    flow.write_text(flow.read_text().split("  - {name: report-daily")[0])
    resynced = cli("schedule", "sync", flow)
    assert "removed report-daily" in resynced.stdout and "updated report-hourly" in resynced.stdout
    table = cli("schedule", "list")
    assert "report-hourly" in table.stdout and "Europe/Paris" in table.stdout


def test_schedule_trigger_prints_the_run_id(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "report.yaml"
    flow.write_text(
        "name: report\n"
        "nodes:\n  a: {call: 'cyclone_test_handlers.queueing:noop'}\n"
        "schedules:\n  - {name: report-daily, cron: '@daily', input: {full: true}}\n"
    )
    assert cli("schedule", "sync", flow).returncode == 0
    fired = cli("schedule", "trigger", "report-daily")
    assert fired.returncode == 0, fired.stderr
    run_id = fired.stdout.strip()
    status = json_output(cli("status", run_id, "--json").stdout)
    assert status["flow_name"] == "report" and status["input"] == {"full": True}
    listed = json_output(cli("schedule", "list", "--json").stdout)
    assert listed[0]["last_run_id"] == run_id
    missing = cli("schedule", "trigger", "ghost")
    no_traceback(missing)
    assert missing.returncode == 1 and "schedule 'ghost' not found" in missing.stderr

"""The command line reads well everywhere (issue 18, "CLI output"): durations written as a
bare number of seconds, full values and ISO 8601 timestamps in a pipe, short run ids, one
``error:`` prefix, ``--version``, empty lists and plain progress. Every test runs the real
``cyclone-flow`` script in a subprocess (stdout a pipe, not a terminal)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers.cli import Runner, json_output, no_traceback
from helpers.paths import TEST_HANDLERS

NOOP = "cyclone_test_handlers.queueing:noop"
WORKER = (
    "worker",
    "--exit-when-idle",
    "--allow-module",
    "cyclone_test_handlers",
    "--import-path",
    str(TEST_HANDLERS),
)


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
    _ok(cli(*WORKER, "--lease-ttl", "30", "--shutdown-timeout", "5", "--poll-interval", "1"))
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

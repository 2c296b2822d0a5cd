"""``cyclone-flow run`` tells each fact once, through the real CLI: a step whose attempts
time out is told by its progress lines only (plain mode; no rescuer's ``WARNING
cyclone_flow: step slow of run ...: step timed out`` line between ``attempt 1 failed``
and ``discarded``), and with ``--json`` by its document only (none of the worker's
``attempt 1 failed (timeout)`` and ``run ... failed`` WARNING lines on stderr). An
``async def`` handler that swallows its cancellation is abandoned at exit with
one line at most naming its step, not asyncio's ``Task was destroyed but it is
pending!``."""

from __future__ import annotations

from pathlib import Path

from helpers.cli import Runner, json_output, no_traceback
from helpers.paths import TEST_HANDLERS

SLEEP = "cyclone_test_handlers.ops:short_sleep"
STUBBORN = "cyclone_test_handlers.asyncio_handlers:stubborn"


def _flow(tmp_path: Path, call: str, attempts: int) -> Path:
    flow = tmp_path / "timeouts.yaml"
    flow.write_text(
        "name: timeouts\nnodes:\n"
        f'  slow: {{call: "{call}", timeout: 1s,'
        f" retry: {{max_attempts: {attempts}, backoff: {{initial: 0s}}}},"
        f' input: {{marker: "{tmp_path / "m"}", seconds: 4}}}}\n',
        encoding="utf-8",
    )
    return flow


def _log_lines(stderr: str) -> list[str]:
    """The lines of stderr a logger printed (``TIME LEVEL LOGGER: ...``)."""
    return [
        line
        for line in stderr.splitlines()
        if any(f" {level} " in line for level in ("WARNING", "ERROR", "INFO"))
    ]


def test_run_tells_a_timed_out_attempt_once_in_plain_and_json_mode(
    cli: Runner, tmp_path: Path
) -> None:
    flow = _flow(tmp_path, SLEEP, attempts=2)
    common = ("--import-path", TEST_HANDLERS, "--workers", "2", "--lease-ttl", "3s")
    plain = cli("run", flow, *common)
    no_traceback(plain)
    assert plain.returncode == 1, plain.stderr
    assert "step slow attempt 1 failed" in plain.stderr, plain.stderr
    assert "step slow discarded" in plain.stderr, plain.stderr
    assert _log_lines(plain.stderr) == [], plain.stderr

    as_json = cli("run", flow, *common, "--json")
    no_traceback(as_json)
    assert as_json.returncode == 1, as_json.stderr
    document = json_output(as_json.stdout)
    assert document["state"] == "failed"
    (slow,) = document["steps"]
    assert [e["error_kind"] for e in slow["errors"]] == ["timeout", "timeout"], slow
    assert _log_lines(as_json.stderr) == [], as_json.stderr


def test_run_abandons_an_async_handler_that_ignores_cancellation_quietly(
    cli: Runner, tmp_path: Path
) -> None:
    flow = _flow(tmp_path, STUBBORN, attempts=1)
    proc = cli("run", flow, "--import-path", TEST_HANDLERS, "--lease-ttl", "3s", "--json")
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    assert json_output(proc.stdout)["state"] == "failed"
    assert "Task was destroyed" not in proc.stderr, proc.stderr
    assert " asyncio: " not in proc.stderr, proc.stderr
    # at most the one line naming the step (the process may end before the loop thread
    # gets to it), and not the rescuer's line about the timeout (the document tells it)
    told = [line for line in _log_lines(proc.stderr) if "abandoned" in line]
    assert len(told) <= 1, proc.stderr
    for line in told:
        assert "abandoned an async handler that ignored cancellation: step slow of run" in line
    assert "step timed out" not in proc.stderr, proc.stderr

"""``cyclone-flow status`` says why each step waits (issue 18), through the real CLI: a
run submitted with ``--delay 1h`` showed only ``available`` on the old code; now its text
output has a ``waiting:`` line with the time it becomes claimable and the missing worker,
and ``--json`` a ``waiting`` object with the reason code and an ISO 8601
``claimable_at``."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from helpers.cli import Runner, json_output, no_traceback

FLOW = """name: later
nodes:
  first: {call: cyclone_test_handlers.queueing:noop}
  then: {call: cyclone_test_handlers.queueing:noop, needs: [first]}
"""


def test_status_explains_a_delayed_step_and_its_dependent(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "later.yaml"
    flow.write_text(FLOW)
    submitted = cli("submit", flow, "--delay", "1h")
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip().split()[-1]
    text = cli("status", run_id)
    no_traceback(text)
    assert text.returncode == 0, text.stderr
    lines = [line for line in text.stdout.splitlines() if line.startswith("waiting: ")]
    assert len(lines) == 2, text.stdout
    assert lines[0].startswith("waiting: first: delayed run: not before its start; claimable at ")
    assert lines[0].endswith("no live worker serves queue 'default'")
    assert lines[1] == "waiting: then: waits for first (available)"
    data = json_output(cli("status", run_id, "--json").stdout)
    first, then = data["steps"]
    assert first["waiting"]["reason"] == "delayed"
    claimable = datetime.fromisoformat(first["waiting"]["claimable_at"])
    created = datetime.fromisoformat(data["created_at"])
    assert timedelta(minutes=59) < claimable - created <= timedelta(hours=1, seconds=5)
    assert first["waiting"]["served"] is False and first["waiting"]["queue"] == "default"
    assert then["waiting"] == {
        "reason": "needs",
        "text": "waits for first (available)",
        "claimable_at": None,
        "needs": ["first"],
    }

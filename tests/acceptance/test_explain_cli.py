"""``cyclone-flow status`` says why each step waits, through the real CLI: a
run submitted with ``--delay 1h`` shows more than ``available``: its text output has a
``waiting:`` line with the time it becomes claimable and the missing worker, and
``--json`` a ``waiting`` object with the reason code and an ISO 8601 ``claimable_at``."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

from helpers.cli import Runner, clean_env, json_output, no_traceback
from helpers.paths import CLI, FLOWS, REPO


def _on_path() -> dict[str, str]:
    """An activated virtual environment: this ``cyclone-flow`` first on PATH."""
    return clean_env(PATH=os.pathsep.join([str(CLI.parent), os.environ.get("PATH", "")]))


def _without_venv(**extra: str) -> dict[str, str]:
    """No activated virtual environment: no ``cyclone-flow`` on PATH."""
    return clean_env(PATH="/usr/bin:/bin", **extra)


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
    assert "no live worker serves queue 'default' (start one: " in lines[0], lines[0]
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


def _hint(status: subprocess.CompletedProcess[str]) -> str:
    no_traceback(status)
    line = next(x for x in status.stdout.splitlines() if "start one: " in x)
    return line.split("start one: ", 1)[1].removesuffix(")")


def test_the_worker_hint_runs_the_waiting_run_as_printed(
    cli: Runner, database_url: str, schema: str
) -> None:
    # from the project's root the example handlers import only with
    # --import-path examples; the printed command must start a worker that completes the run
    submitted = cli("submit", FLOWS / "hello.yaml", "--input", '{"name": "Ada"}', cwd=REPO)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    # an activated virtual environment: this cyclone-flow first on PATH, named as such
    hint = _hint(cli("status", run_id, cwd=REPO, env=_on_path()))
    assert hint == (
        "cyclone-flow worker --queue default --allow-module cyclone_examples --import-path examples"
    ), hint
    # none activated (the README's install): the script by its path, as a shell runs it
    hint = _hint(cli("status", run_id, cwd=REPO, env=_without_venv()))
    assert hint == (
        f"{CLI} worker --queue default --allow-module cyclone_examples --import-path examples"
    ), hint
    worker = subprocess.run(
        f"{hint} --exit-when-idle --poll-interval 20ms,200ms",
        shell=True,
        cwd=REPO,
        env=_without_venv(CYCLONE_DATABASE_URL=database_url, CYCLONE_SCHEMA=schema),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert worker.returncode == 0, worker.stderr
    done = json_output(cli("status", run_id, "--json").stdout)
    assert done["state"] == "completed", done

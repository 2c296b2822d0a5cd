"""Acceptance test of the failure-handling example (examples/flows/flaky_pipeline.yaml):
``cyclone-flow run`` on the real stocks CSV retries the flaky feed with backoff, times the
hanging quote lookup out and retries it, and contains the permanently failing check with
``cancel_branch``; the run completes."""

from __future__ import annotations

import json
from datetime import datetime

from helpers.cli import Runner, no_traceback
from helpers.paths import EXAMPLES, FLOWS

FLAKY = FLOWS / "flaky_pipeline.yaml"


def test_flaky_pipeline_retries_times_out_and_contains_a_failure(cli: Runner) -> None:
    proc = cli("run", FLAKY, "--import-path", EXAMPLES, "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    data = json.loads(proc.stdout)
    assert (data["state"], data["error"]) == ("completed", None)
    steps = {s["node"]: s for s in data["steps"]}

    fetch = steps["fetch"]  # two outage attempts, then success, with backoff between them
    assert (fetch["state"], fetch["attempt"], fetch["max_attempts"]) == ("completed", 3, 4)
    assert [(e["attempt"], e["error_kind"]) for e in fetch["errors"]] == [
        (1, "handler_error"),
        (2, "handler_error"),
    ]
    assert all("ConnectionError: price feed unavailable" in e["error"] for e in fetch["errors"])
    first, second = (datetime.fromisoformat(e["at"]) for e in fetch["errors"])
    assert (second - first).total_seconds() >= 0.2 * 0.8  # initial 200ms, jitter 0.2

    latest = steps["latest"]  # attempt 1 hangs past its 2s timeout
    assert (latest["state"], latest["attempt"]) == ("completed", 2)
    assert [(e["attempt"], e["error_kind"]) for e in latest["errors"]] == [(1, "timeout")]

    check = steps["full_history"]  # PermanentError on the real file: no retry
    assert (check["state"], check["attempt"], check["error_kind"]) == (
        "discarded",
        1,
        "handler_error",
    )
    assert "GOOG starts 55 months late" in check["error"]
    ranking = steps["full_period_ranking"]
    assert (ranking["state"], ranking["started_at"]) == ("cancelled", None)
    assert steps["report"]["state"] == "completed"
    assert all(s["reclaims"] == 0 for s in data["steps"])

    report = data["output"]["report"]  # the only completed leaf
    assert list(data["output"]) == ["report"]
    assert (report["feed_attempt"], report["quote_attempt"]) == (3, 2)
    assert report["symbols"] == ["AAPL", "AMZN", "GOOG", "MSFT", "IBM"]
    assert report["latest"]["AAPL"] == {
        "month": "2010-03",
        "price": 223.02,
        "change_12m_pct": 112.16,
    }


def test_flaky_pipeline_fails_when_the_outage_outlasts_the_retries(cli: Runner) -> None:
    proc = cli(
        "run",
        FLAKY,
        "--import-path",
        EXAMPLES,
        "--input",
        '{"outage_attempts": 4, "hang_first": false}',
    )
    no_traceback(proc)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    # the progress tells the step's error once; the run's last line names the step
    assert "  step fetch discarded: ConnectionError: price feed unavailable" in proc.stderr
    assert proc.stderr.count("price feed unavailable") == 4, proc.stderr  # 4 attempts
    assert proc.stderr.rstrip().endswith("failed: step fetch discarded")

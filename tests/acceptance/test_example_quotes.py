"""Acceptance test of the flow-control example (examples/flows/quotes.yaml, docs/flow-control.md):
``cyclone-flow run`` claims its limited step through the limited claim (concurrency per
symbol, the feed's rate limit) and completes with the symbol's latest price; ``status
--json`` shows the step's keys."""

from __future__ import annotations

import json

from helpers.cli import Runner
from helpers.paths import EXAMPLES, FLOWS

QUOTES = FLOWS / "quotes.yaml"


def test_quotes_example_runs_under_its_limits(cli: Runner) -> None:
    proc = cli("run", QUOTES, "--import-path", EXAMPLES, "--input", '{"symbol": "IBM"}', "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    data = json.loads(proc.stdout)
    assert data["state"] == "completed"
    assert data["output"]["quote"]["symbol"] == "IBM"
    (step,) = data["steps"]
    assert step["concurrency"] == {"key": "quote/IBM", "limit": 1}
    assert step["rate_limit"] == {"key": "price-feed", "limit": 5, "per_s": 1.0}

"""``status`` shows no attempt (``–``) for a step that was never claimed (skipped,
cancelled before it ran), its ``N/M`` for one that ran; ``--json`` keeps the raw
``attempt`` / ``max_attempts``."""

from __future__ import annotations

import json
from collections.abc import Callable

from helpers.cli import Runner

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text

B = "cyclone_test_handlers.basic"
FLOW = load_flow_text(
    f"""
name: attempts-shown
nodes:
  a: {{call: {B}:boom, when: "run.input.fail"}}
  b: {{call: {B}:echo, needs: [a]}}
  c: {{call: {B}:echo, needs: [b], on_dep_skip: run}}
"""
)


def _attempts(table: str) -> dict[str, str]:
    """The attempt cell of each row of ``status``'s steps table, by node."""
    out = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) > 2 and cells[0] and cells[0] != "node":
            out[cells[0]] = cells[2]
    return out


def test_steps_never_claimed_show_no_attempt(
    cli: Runner, make_client: Callable[..., Client]
) -> None:
    client = make_client(workers=2)
    client.start()
    failed = client.submit(FLOW, {"fail": True})
    skipped = client.submit(FLOW, {"fail": False})
    assert client.wait(failed, timeout=15).state == "failed"
    assert client.wait(skipped, timeout=15).state == "completed"

    shown = cli("status", failed)
    assert shown.returncode == 0, shown.stderr
    states = {s.node: str(s.state) for s in client.list_steps(failed)}
    assert states == {"a": "discarded", "b": "cancelled", "c": "cancelled"}
    assert _attempts(shown.stdout) == {"a": "1/1", "b": "–", "c": "–"}
    raw = {s["node"]: s for s in json.loads(cli("status", failed, "--json").stdout)["steps"]}
    assert (raw["b"]["attempt"], raw["b"]["max_attempts"]) == (1, 1)

    again = cli("status", skipped)
    assert again.returncode == 0, again.stderr
    # a skipped (its when: was false), b skipped with it, c ran (on_dep_skip: run)
    assert _attempts(again.stdout) == {"a": "–", "b": "–", "c": "1/1"}

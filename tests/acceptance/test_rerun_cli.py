"""``cyclone-flow rerun`` and how ``status`` shows reused and skipped steps:
exit 0 with the new run, 1 (no traceback, nothing written) when refused, 2 for usage."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from helpers.cli import Runner, json_output, no_traceback
from helpers.paths import EXAMPLES, FLOWS

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text

H = "cyclone_test_handlers.conditions"
FLOW = load_flow_text(
    f"""
name: cli-rerun
nodes:
  a:
    call: {H}:value
    input: {{n: "${{{{ run.input.n }}}}"}}
  b:
    call: {H}:echo
    needs: [a]
    when: "nodes.a.output.n > 1"
  c:
    call: {H}:value
    needs: [a]
    input: {{from_a: "${{{{ nodes.a.output.n }}}}"}}
"""
)


def _rows(table: str) -> dict[str, dict[str, str]]:
    """The cells of each row of ``status``'s steps table by column name, by node (the
    columns empty in every row are not shown)."""
    out = {}
    header: list[str] = []
    for line in table.splitlines():
        if line.startswith("┃") and not header:
            header = [c.strip() for c in line.split("┃")[1:-1]]
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) > 2 and cells[0] and cells[0] != "node":
            out[cells[0]] = dict(zip(header, cells, strict=True))
    return out


def _count(db: Any) -> int:
    return int(db.execute("SELECT count(*) FROM cyclone_runs").fetchone()[0])


def test_rerun_and_status(cli: Runner, make_client: Callable[..., Client], db: Any) -> None:
    client = make_client(workers=2)
    client.start()
    original = client.submit(FLOW, {"n": 1})
    assert client.wait(original, timeout=15).state == "completed"

    status = cli("status", original)
    assert status.returncode == 0, status.stderr
    assert "skipped: when 'nodes.a.output.n > 1' was false (nodes.a.output.n = 1)" in status.stdout

    done = cli("rerun", original[:8], "--from", "c", "--json")
    assert done.returncode == 0, done.stderr
    out = json_output(done.stdout)
    assert out["rerun_of"] == original
    assert (sorted(out["reused"]), out["rerun"]) == (["a", "b"], ["c"])
    new_id = out["run_id"]
    assert client.wait(new_id, timeout=15).state == "completed"
    shown = cli("status", new_id)
    assert shown.returncode == 0, shown.stderr
    assert f"rerun of run {original} (2 steps reused)" in shown.stdout
    rows = _rows(shown.stdout)
    # a reused step is named by the run it comes from and its node, not by a row id; a
    # reused skipped step says both; neither was claimed in this run: no attempt
    assert f"reused from run {original[:8]} (node a)" in rows["a"]["detail"]
    assert rows["b"]["detail"] == (
        "skipped: when 'nodes.a.output.n > 1' was false (nodes.a.output.n = 1); "
        f"reused from run {original[:8]} (node b)"
    )
    assert (rows["a"]["attempt"], rows["b"]["attempt"], rows["c"]["attempt"]) == ("–", "–", "1/1")
    graph = cli("graph", "--run", new_id)
    assert graph.returncode == 0, graph.stderr
    assert f"reused from run {original[:8]} (node a)" in graph.stdout
    assert f"was false (nodes.a.output.n = 1); reused from run {original[:8]} (node b)" in (
        graph.stdout
    )
    as_json = json.loads(cli("status", new_id, "--json").stdout)
    assert as_json["rerun_of"] == original
    by_node = {s["node"]: s for s in as_json["steps"]}
    assert by_node["a"]["reused_from"] is not None and by_node["c"]["reused_from"] is None
    assert (by_node["a"]["attempt"], by_node["a"]["max_attempts"]) == (1, 1)  # the raw fields
    assert by_node["b"]["skip_reason"] == {
        "when": "nodes.a.output.n > 1",
        "values": {"nodes.a.output.n": 1},
    }

    plain = cli("rerun", original, "--from", "b")
    assert plain.returncode == 0, plain.stderr
    assert f"rerun of run {original}" in plain.stdout and "reused: a, c" in plain.stdout


def test_refused_and_usage(cli: Runner, make_client: Callable[..., Client], db: Any) -> None:
    client = make_client(workers=1)
    client.start()
    original = client.submit(FLOW, {"n": 2})
    assert client.wait(original, timeout=15).state == "completed"
    before = _count(db)
    refused = cli("rerun", original, "--from", "c", "--input-patch", '{"n": 3}')
    assert refused.returncode == 1
    assert "changes what node 'a' read" in refused.stderr and "--force" in refused.stderr
    no_traceback(refused)
    unknown = cli("rerun", original, "--from", "ghost")
    assert unknown.returncode == 1 and "no node 'ghost'" in unknown.stderr
    no_traceback(unknown)
    assert _count(db) == before
    usage = cli("rerun", original)
    assert usage.returncode == 2 and "--from NODE" in usage.stderr
    both = cli("rerun", original, "--from", "c", "--input", "{}", "--input-patch", "{}")
    assert both.returncode == 2
    forced = cli("rerun", original, "--from", "c", "--input-patch", '{"n": 3}', "--force")
    assert forced.returncode == 0, forced.stderr
    assert "runs again: a, b, c" in forced.stdout


def test_the_orders_example_skips_reruns_and_reuses(cli: Runner) -> None:
    orders = FLOWS / "orders.yaml"
    lamp = '{"sku": "lamp", "qty": 1, "gift": true}'
    proc = cli("run", orders, "--import-path", EXAMPLES, "--json", "--input", lamp)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    data = json_output(proc.stdout)
    steps = {s["node"]: s["state"] for s in data["steps"]}
    assert steps == {
        "price": "completed",
        "stock": "completed",
        "ship": "skipped",
        "track": "skipped",
        "wrap": "completed",
        "receipt": "completed",
    }
    assert data["output"] == {
        "receipt": {
            "lines": ["total: 40.00", "not shipped: out of stock", "gift-wrapped"],
            "shipped": False,
        }
    }
    rerun = cli("rerun", data["id"], "--from", "receipt", "--json")
    assert rerun.returncode == 0, rerun.stderr
    new_id = json_output(rerun.stdout)["run_id"]
    worker = cli(
        "worker",
        "--exit-when-idle",
        "--allow-module",
        "cyclone_examples",
        "--import-path",
        EXAMPLES,
        "--poll-interval",
        "20ms,200ms",
    )
    assert worker.returncode == 0, worker.stderr
    again = json_output(cli("status", new_id, "--json").stdout)
    assert again["state"] == "completed" and again["rerun_of"] == data["id"]
    assert again["output"] == data["output"]
    reused = {s["node"] for s in again["steps"] if s.get("reused_from") is not None}
    assert reused == {"price", "stock", "ship", "track", "wrap"}

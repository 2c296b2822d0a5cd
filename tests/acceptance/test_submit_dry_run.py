"""``cyclone-flow submit --dry-run`` (the real console script): the flow linted, the input
and options checked and the plan printed (the steps in run order with queue, needs and
first state), and nothing written: no row in any engine table, no database even needed.
Bad input exits as ``submit`` does, with the same message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.cli import Runner, json_output, no_traceback, run_cli
from helpers.paths import FLOWS

HELLO = FLOWS / "hello.yaml"
TABLES = ("cyclone_workflows", "cyclone_runs", "cyclone_steps", "cyclone_deps", "cyclone_workers")

QUEUED = """\
name: dry-queues
nodes:
  fetch:
    call: pkg.mod:fetch
  own:
    call: pkg.mod:own
    queue: special
    priority: 5
    needs: [fetch]
  late:
    call: pkg.mod:late
    needs: [own, fetch]
  early:
    call: pkg.mod:early
"""


def _counts(db: psycopg.Connection[Any]) -> dict[str, int]:
    out = {}
    for table in TABLES:
        row = db.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert row is not None
        out[table] = row[0]
    return out


def test_dry_run_prints_the_plan_and_writes_nothing(cli: Runner, db: psycopg.Connection[Any]):
    before = _counts(db)
    proc = cli("submit", HELLO, "--input", '{"name": "Ada"}', "--dry-run")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "nothing was written" in proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"flow hello ({HELLO}): 2 step(s)"
    assert lines[1] == 'input: {"name": "Ada"}'
    greet = next(line for line in lines if " greet " in line)
    shout = next(line for line in lines if " shout " in line)
    assert lines.index(greet) < lines.index(shout)
    for cell in ("action", "default", "available", "cyclone_examples.demo:greet"):
        assert cell in greet, greet
    for cell in ("pending", "cyclone_examples.demo:shout"):
        assert cell in shout, shout
    assert _counts(db) == before == dict.fromkeys(TABLES, 0)


def test_dry_run_json_has_steps_in_run_order_with_queue_and_needs(
    cli: Runner, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    flow = tmp_path / "queues.yaml"
    flow.write_text(QUEUED, encoding="utf-8")
    proc = cli(
        "submit", flow, "--dry-run", "--json", "--queue", "bulk", "--priority", "-3",
        "--delay", "90", "--sequence", "s1",
    )  # fmt: skip
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    plan = json_output(proc.stdout)
    assert plan["dry_run"] is True
    assert (plan["flow"], plan["input"], plan["child_flows"]) == ("dry-queues", None, [])
    assert plan["options"] == {"queue": "bulk", "priority": -3, "delay_s": 90.0, "sequence": "s1"}
    steps = [(s["node"], s["queue"], s["priority"], s["needs"], s["state"]) for s in plan["steps"]]
    assert steps == [
        ("fetch", "bulk", -3, [], "available"),
        ("own", "special", 5, ["fetch"], "pending"),  # its own queue and priority stay
        ("late", "bulk", -3, ["own", "fetch"], "pending"),
        ("early", "bulk", -3, [], "available"),
    ]
    assert "sequence holds this run is known only at submit" in proc.stderr
    assert _counts(db) == dict.fromkeys(TABLES, 0)


def test_dry_run_of_child_flows_fills_defaults_and_names_the_children(cli: Runner) -> None:
    proc = cli("submit", FLOWS / "csv_children.yaml", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json_output(proc.stdout)
    assert plan["input"] == {"a": "seattle-weather.csv", "b": "stocks.csv"}
    assert plan["child_flows"] == ["csv-profile"]
    weather = plan["steps"][0]
    assert (weather["node"], weather["type"], weather["flow"]) == (
        "weather",
        "child",
        "csv-profile",
    )
    assert weather["max_wait_s"] == 600
    assert plan["steps"][-1]["node"] == "compare"


def test_dry_run_needs_no_database() -> None:
    proc = run_cli(
        "submit", HELLO, "--dry-run", "--database-url", "postgresql://nobody@127.0.0.1:1/x"
    )
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "using database" not in proc.stderr


BAD_FLOW = "name: bad\nnodes:\n  a: {call: pkg.mod:a, needs: [nope]}\n"


@pytest.mark.parametrize(
    ("case", "args", "code"),
    [
        ("input", ["--input", '{"name": 5}'], 1),
        ("extra input", ["--input", '{"nam": "Ada"}'], 1),
        ("input json", ["--input", "{nope"], 2),
        ("delay", ["--delay", "forever"], 2),
        ("window without key", ["--unique-window", "1h"], 2),
        ("states", ["--unique-key", "k", "--unique-states", "completed"], 2),
        ("lint", ["FILE"], 1),
    ],
)
def test_dry_run_rejects_what_submit_rejects(
    cli: Runner, db: psycopg.Connection[Any], tmp_path: Path, case: str, args: list[str], code: int
) -> None:
    target: Path = HELLO
    if args == ["FILE"]:
        target = tmp_path / "bad.yaml"
        target.write_text(BAD_FLOW, encoding="utf-8")
        args = []
    dry = cli("submit", target, *args, "--dry-run")
    real = cli("submit", target, *args)
    for proc in (dry, real):
        no_traceback(proc)
    assert dry.returncode == real.returncode == code, (dry.stderr, real.stderr)

    def problems(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("cyclone-flow: using")]

    assert problems(dry.stderr) == problems(real.stderr)
    assert dry.stdout == ""
    assert _counts(db) == dict.fromkeys(TABLES, 0)


def test_dry_run_with_wait_is_a_usage_error(cli: Runner) -> None:
    proc = cli("submit", HELLO, "--dry-run", "--wait")
    no_traceback(proc)
    assert proc.returncode == 2
    assert "error: --dry-run writes no run to wait for" in proc.stderr


CONDITIONAL = """\
name: dry-when
nodes:
  gift:
    call: pkg.mod:wrap
    when: "run.input.gift"
  card:
    call: pkg.mod:card
    needs: [gift]
  ship:
    call: pkg.mod:ship
    when: "run.input.qty > 0"
"""


def test_dry_run_decides_a_conditional_root_as_submit_does(tmp_path: Path) -> None:
    """A root with ``when:`` is inserted pending and decided at submit on the input: the
    plan shows that decision (and the skip-cascade below it), not ``available``."""
    flow = tmp_path / "when.yaml"
    flow.write_text(CONDITIONAL)
    args = ("submit", flow, "--dry-run", "--input", '{"gift": false, "qty": 2}')
    proc = run_cli(*args)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("│")[2].strip(): line for line in proc.stdout.splitlines() if "│" in line}
    assert "skipped (when: false)" in rows["gift"], rows["gift"]
    assert "skipped (upstream gift skipped)" in rows["card"], rows["card"]
    assert "available (when: true)" in rows["ship"], rows["ship"]
    data = json_output(run_cli(*args, "--json").stdout)
    gift = next(s for s in data["steps"] if s["node"] == "gift")
    assert gift["state"] == "skipped" and gift["when"] == "run.input.gift"
    assert gift["skip_reason"] == {"when": "run.input.gift", "values": {"run.input.gift": False}}


LIMITED = """\
name: dry-limits
input_schema: {type: object, properties: {symbol: {type: string}, ids: {type: array}}}
nodes:
  fetch:
    call: pkg.mod:fetch
    concurrency: {group: quote, key: "${{ run.input.symbol }}", limit: 2}
    rate_limit: {key: api, limit: 10, per: 1s}
  pick:
    call: pkg.mod:pick
    concurrency: {key: "${{ run.input.ids.1 }}", limit: 1}
  later:
    call: pkg.mod:later
    needs: [fetch]
    concurrency: {key: "${{ nodes.fetch.output.region }}", limit: 1}
  plain:
    call: pkg.mod:plain
"""


def test_dry_run_shows_each_steps_limits_with_the_keys_submit_renders(
    cli: Runner, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    flow = tmp_path / "limits.yaml"
    flow.write_text(LIMITED, encoding="utf-8")
    given = '{"symbol": "MSFT", "ids": [7, {"a": 1}]}'
    table = run_cli("submit", flow, "--dry-run", "--input", given)
    no_traceback(table)
    assert table.returncode == 0, table.stderr
    fetch = next(line for line in table.stdout.splitlines() if " fetch " in line)
    assert "concurrency quote/MSFT <= 2; rate dry-limits.fetch/api <= 10 per 1s" in fetch
    plan = json_output(run_cli("submit", flow, "--dry-run", "--input", given, "--json").stdout)
    shown = {s["node"]: (s.get("concurrency"), s.get("rate_limit")) for s in plan["steps"]}
    assert shown["fetch"] == (
        {"key": "quote/MSFT", "limit": 2},
        {"key": "dry-limits.fetch/api", "limit": 10, "per_s": 1.0},
    )
    assert shown["later"] == (
        {"key": "dry-limits.later/${{ nodes.fetch.output.region }}", "limit": 1},
        None,
    )
    assert shown["plain"] == (None, None)
    # the keys a real submit writes (cyclone_limit_key) are those the dry run showed
    done = cli("submit", flow, "--input", given)
    assert done.returncode == 0, done.stderr
    rows = dict(
        db.execute(
            "SELECT node, concurrency_key FROM cyclone_steps WHERE node IN ('fetch', 'pick')"
        ).fetchall()
    )
    assert rows == {"fetch": shown["fetch"][0]["key"], "pick": shown["pick"][0]["key"]}
    assert rows["pick"] == 'dry-limits.pick/{"a": 1}'
    no_limits = run_cli("submit", HELLO, "--dry-run")  # no limits: no empty column either
    assert "limits" not in no_limits.stdout.splitlines()[2], no_limits.stdout

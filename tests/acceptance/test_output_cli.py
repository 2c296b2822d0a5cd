"""Step outputs on the command line through the real ``cyclone-flow``
script: every step of the ``--json`` documents of ``run``, ``status`` and ``submit
--wait`` carries its ``output`` (cut past the dashboard's cap, ``output_truncated``
true), every step has the same keys whatever its node type, and ``cyclone-flow output
RUN [NODE] [--item N]`` prints one node's (or item's, or the run's) output: exit 1 with
its state when it has none yet and for an unknown run (as every command), 2 for an unknown
node or item. The run's own ``output`` is capped the same way (run-level
``output_truncated``, not the whole 65 KB leaf); ``NODE[i]`` is ``NODE --item i`` for
``output`` (not "no node 'each[1]'"), and ``logs --node`` exits 2 for a node the run
does not have (not exit 0, "no log lines")."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from helpers.cli import WORKER, Runner, json_output, no_traceback
from helpers.paths import TEST_HANDLERS

from cyclone_flow._json import OUTPUT_SHOWN_BYTES

BIG = OUTPUT_SHOWN_BYTES + 1000
"""Characters of the big output: over the cap."""

FLOW = """\
name: outputs
nodes:
  make:
    call: cyclone_test_handlers.node_types:numbers
    input: {n: 3}
  each:
    type: fan_out
    needs: [make]
    over: "${{ nodes.make.output.items }}"
    call: cyclone_test_handlers.node_types:square
  big:
    call: cyclone_test_handlers.basic:echo
    input: "${{ run.input.blob }}"
  kid:
    type: child
    flow: child.yaml
    input: {v: 7}
"""

CHILD = """\
name: outputs-child
nodes:
  c:
    call: cyclone_test_handlers.basic:echo
    input: "${{ run.input }}"
"""

GATE = """\
  gate:
    type: wait_signal
    signal: go
    needs: [make]
"""

STEP_KEYS = {
    "node",
    "state",
    "attempt",
    "max_attempts",
    "reclaims",
    "queue",
    "started_at",
    "finished_at",
    "error",
    "error_kind",
    "errors",
    "type",
    "skip_reason",
    "reused_from",
    "parent_node",
    "item_index",
    "items",
    "child_run_id",
    "signal",
    "wait_until",
    "concurrency",
    "rate_limit",
    "output",
    "output_truncated",
}
"""The keys of every step of a run's ``--json`` document (``status`` adds ``waiting``)."""

RUN_KEYS = {
    "id",
    "flow_name",
    "state",
    "input",
    "output",
    "error",
    "error_kind",
    "created_at",
    "finished_at",
    "digest",
    "parent_run_id",
    "parent_node",
    "deadline_at",
    "rerun_of",
    "revision",
    "output_truncated",
    "steps",
}
"""The keys of a run's ``--json`` document with its steps (``status`` adds
``queue_features`` and ``log_tail``)."""


def _flows(tmp_path: Path, *, gate: bool = False) -> Path:
    (tmp_path / "child.yaml").write_text(CHILD, encoding="utf-8")
    path = tmp_path / "outputs.yaml"
    path.write_text(FLOW + (GATE if gate else ""), encoding="utf-8")
    return path


def _ok(proc: Any) -> Any:
    no_traceback(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _blob() -> str:
    return json.dumps({"blob": "x" * BIG})


def _check_outputs(document: dict[str, Any]) -> None:
    """What a script reads from ``.steps[].output`` of the finished run of FLOW."""
    steps = {s["node"]: s for s in document["steps"]}
    assert set(steps) == {"make", "each", "big", "kid"}
    assert steps["make"]["output"] == {"items": [0, 1, 2]}
    assert steps["each"]["output"] == [0, 1, 4]
    assert steps["kid"]["output"] == {"c": {"v": 7}}
    assert not any(steps[n]["output_truncated"] for n in ("make", "each", "kid"))
    # over the dashboard's cap: left out, and said so
    assert steps["big"]["output"] is None and steps["big"]["output_truncated"] is True
    for step in document["steps"]:
        assert set(step) - {"waiting"} == STEP_KEYS, step["node"]


def test_run_json_lists_each_steps_output_capped_and_output_prints_it(
    cli: Runner, tmp_path: Path
) -> None:
    flow = _flows(tmp_path)
    proc = _ok(cli("run", flow, "--import-path", TEST_HANDLERS, "--input", _blob(), "--json"))
    document = json_output(proc.stdout)
    assert document["state"] == "completed"
    _check_outputs(document)
    run_id = document["id"]
    _check_outputs(json_output(_ok(cli("status", run_id, "--json")).stdout))

    def output(*args: str) -> Any:
        return json_output(_ok(cli("output", run_id, *args)).stdout)

    assert output("make") == {"items": [0, 1, 2]}  # an action
    assert output("each") == [0, 1, 4]  # a fan-out node: its item outputs
    assert output("each", "--item", "2") == 4  # one item
    assert output("kid") == {"c": {"v": 7}}  # a child node: the child run's output
    assert output("big") == "x" * BIG  # whole, not cut
    # the run's, whole: in the --json documents it is over the cap (its leaf big)
    assert output() == {"each": [0, 1, 4], "big": "x" * BIG, "kid": {"c": {"v": 7}}}
    assert (document["output"], document["output_truncated"]) == (None, True)

    for args, says in (
        (("nope",), "run {run} has no node 'nope' (its nodes: make, each, big, kid)"),
        (("each", "--item", "3"), "node 'each' has no item 3 (items 0 to 2)"),
        (("make", "--item", "0"), "node 'make' is no fan-out node (action): it has no items"),
    ):
        unknown = cli("output", run_id, *args)
        no_traceback(unknown)
        assert unknown.returncode == 2, (args, unknown.stdout, unknown.stderr)
        assert unknown.stdout == ""
        assert says.format(run=run_id) in unknown.stderr, unknown.stderr
    missing = cli("output", str(uuid.uuid4()), "make")
    no_traceback(missing)
    assert missing.returncode == 1 and "not found" in missing.stderr, missing.stderr
    usage = cli("output", run_id, "--item", "1")
    assert usage.returncode == 2 and "--item goes with NODE" in usage.stderr, usage.stderr


def test_output_of_a_node_that_has_not_run_exits_1_naming_its_state(
    cli: Runner, tmp_path: Path
) -> None:
    run_id = _ok(cli("submit", _flows(tmp_path), "--input", _blob())).stdout.strip()
    for args, node, state in (
        (("make",), "make", "available"),
        (("each",), "each", "pending"),
        (("each", "--item", "1"), "each[1]", "pending"),  # its items are not made yet
    ):
        proc = cli("output", run_id, *args)
        no_traceback(proc)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert proc.stdout == ""
        assert f"node {node} of run {run_id} has no output: it is {state}" in proc.stderr
    run = cli("output", run_id)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"run {run_id} has no output: it is running" in run.stderr
    # not-run steps in the --json document: a null output, not cut
    steps = json_output(_ok(cli("status", run_id, "--json")).stdout)["steps"]
    assert {(s["output"], s["output_truncated"]) for s in steps} == {(None, False)}


def test_submit_wait_json_lists_each_steps_output(
    cli: Runner, make_client: Any, tmp_path: Path
) -> None:
    make_client(workers=2).start()
    flow = _flows(tmp_path)
    proc = _ok(cli("submit", flow, "--input", _blob(), "--wait", "--json"))
    document = json_output(proc.stdout)
    assert document["state"] == "completed"
    _check_outputs(document)
    assert set(document) == RUN_KEYS
    assert (document["output"], document["output_truncated"]) == (None, True)


def test_every_step_of_status_json_has_the_same_keys_for_each_node_type(
    cli: Runner, tmp_path: Path
) -> None:
    flow = _flows(tmp_path, gate=True)
    run_id = _ok(cli("submit", flow, "--input", _blob())).stdout.strip()
    # everything runs but the gate, which waits for its signal
    _ok(cli(*WORKER))
    document = json_output(_ok(cli("status", run_id, "--json", "--items")).stdout)
    assert set(document) == RUN_KEYS | {"queue_features", "log_tail"}
    by_type: dict[str, list[dict[str, Any]]] = {}
    for step in document["steps"]:
        by_type.setdefault(step["type"], []).append(step)
    assert set(by_type) == {"action", "fan_out", "fan_out_item", "child", "wait_signal"}
    for kind, steps in by_type.items():
        for step in steps:
            assert set(step) == STEP_KEYS | {"waiting"}, (kind, sorted(set(step) ^ STEP_KEYS))
    (gate,) = by_type["wait_signal"]
    assert (gate["state"], gate["signal"], gate["items"], gate["child_run_id"]) == (
        "waiting",
        "go",
        None,
        None,
    )
    assert gate["waiting"] is not None and gate["output"] is None
    (kid,) = by_type["child"]
    assert kid["child_run_id"] is not None and kid["signal"] is None and kid["items"] is None
    (each,) = by_type["fan_out"]
    assert each["items"] == {"total": 3, "done": 3, "states": {"completed": 3}}
    assert each["child_run_id"] is None and each["signal"] is None
    item = next(s for s in by_type["fan_out_item"] if s["item_index"] == 1)
    assert (item["parent_node"], item["output"], item["items"]) == ("each", 1, None)
    make = next(s for s in by_type["action"] if s["node"] == "make")
    assert (make["parent_node"], make["item_index"], make["wait_until"]) == (None, None, None)
    assert (make["concurrency"], make["rate_limit"], make["skip_reason"]) == (None, None, None)


SMALL = """\
name: small-outputs
nodes:
  a:
    call: cyclone_test_handlers.basic:echo
    input: "${{ run.input }}"
"""


def test_the_runs_output_in_json_documents_is_capped_as_a_steps(
    cli: Runner, tmp_path: Path
) -> None:
    flow = tmp_path / "small.yaml"
    flow.write_text(SMALL, encoding="utf-8")
    big = "y" * BIG
    document = json_output(
        _ok(
            cli("run", flow, "--import-path", TEST_HANDLERS, "--input", json.dumps(big), "--json")
        ).stdout
    )
    run_id = document["id"]
    status = json_output(_ok(cli("status", run_id, "--json")).stdout)
    (listed,) = json_output(_ok(cli("runs", "--json")).stdout)
    for doc in (document, status, listed):
        assert (doc["output"], doc["output_truncated"]) == (None, True)
    assert json_output(_ok(cli("output", run_id)).stdout) == {"a": big}  # whole
    # under the cap: shown, not cut
    small = json_output(
        _ok(cli("run", flow, "--import-path", TEST_HANDLERS, "--input", '"z"', "--json")).stdout
    )
    assert (small["output"], small["output_truncated"]) == ({"a": "z"}, False)


def _small_run(cli: Runner, tmp_path: Path) -> str:
    """The id of a completed run of FLOW with a small ``big`` output."""
    proc = cli(
        "run",
        _flows(tmp_path),
        "--import-path",
        TEST_HANDLERS,
        "--input",
        json.dumps({"blob": "b"}),
        "--json",
    )
    return str(json_output(_ok(proc).stdout)["id"])


def test_run_id_errors_of_output_exit_1_as_for_every_command(cli: Runner) -> None:
    for args, says in (
        (("b69",), "run id 'b69' is too short"),
        (("b69", "make"), "run id 'b69' is too short"),
        (("0000",), "not found"),
        ((str(uuid.uuid4()), "make"), "not found"),
    ):
        proc = cli("output", *args)
        no_traceback(proc)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert says in proc.stderr and proc.stdout == "", (args, proc.stderr)
        assert cli("logs", args[0]).returncode == 1  # the rule output now follows


def test_output_takes_node_i_as_node_item_i(cli: Runner, tmp_path: Path) -> None:
    run_id = _small_run(cli, tmp_path)
    assert json_output(_ok(cli("output", run_id, "each[1]")).stdout) == 1
    assert json_output(_ok(cli("output", run_id, "each[2]", "--item", "2")).stdout) == 4
    for args, says in (
        (("each[3]",), "node 'each' has no item 3 (items 0 to 2)"),
        (("make[0]",), "node 'make' is no fan-out node (action): it has no items"),
        (("each[1]", "--item", "2"), "each[1] and --item 2 name different items"),
    ):
        proc = cli("output", run_id, *args)
        no_traceback(proc)
        assert proc.returncode == 2 and says in proc.stderr, (args, proc.stderr)


def test_logs_of_a_node_the_run_does_not_have_exits_2_naming_it(
    cli: Runner, tmp_path: Path
) -> None:
    run_id = _small_run(cli, tmp_path)
    for node, says in (
        ("nosuch", f"run {run_id} has no node 'nosuch' (its nodes: make, each, big, kid)"),
        ("each[3]", "node 'each' has no item 3 (items 0 to 2)"),
        ("make[0]", "node 'make' is no fan-out node (action): it has no items"),
    ):
        proc = cli("logs", run_id, "--node", node)
        no_traceback(proc)
        assert proc.returncode == 2, (node, proc.stdout, proc.stderr)
        assert says in proc.stderr and proc.stdout == "", (node, proc.stderr)
    for args, says in (
        (("--node", "each[1]"), "has no log lines of node each[1]"),
        (("--attempt", "5"), "has no log lines of attempt 5"),
        (("--node", "make", "--attempt", "5"), "has no log lines of node make, attempt 5"),
    ):
        proc = cli("logs", run_id, *args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert f"run {run_id} {says}\n" in proc.stderr, (args, proc.stderr)

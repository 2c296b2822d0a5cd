"""How ``deploy``, ``diff`` and ``flows rollback`` word a result (cyclone_flow.cli.deploy_cmds),
on plans built by hand: the one-line summaries, the text diff and the GitHub Markdown."""

from __future__ import annotations

from typing import Any

from cyclone_flow.cli.deploy_cmds import github_diff, plan_line, problem_line, text_diff
from cyclone_flow.deployments import CompatProblem, DeployResult, FlowPlan
from cyclone_flow.flowfile.compare import compare_documents, source_diff
from cyclone_flow.gitinfo import GitInfo
from cyclone_flow.schedules import SyncResult

OLD: dict[str, Any] = {
    "name": "nightly",
    "nodes": {"a": {"call": "m:f"}, "b": {"call": "m:g", "needs": ["a"]}},
    "schedules": [{"name": "nightly-daily", "cron": "0 2 * * *"}],
}
NEW: dict[str, Any] = {
    "name": "nightly",
    "nodes": {"a": {"call": "m:f", "timeout": "30s"}, "b": {"call": "m:h", "needs": ["a"]}},
    "schedules": [{"name": "nightly-daily", "cron": "0 3 * * *"}],
}
OLD_SRC = "name: nightly\n# ```fenced``` in a comment\n"
NEW_SRC = "name: nightly\n# changed\n"


def _plan(**fields: Any) -> FlowPlan:
    base: dict[str, Any] = {
        "name": "nightly",
        "path": "flows/nightly.yaml",
        "status": "changed",
        "previous": 2,
        "revision": 3,
        "change": compare_documents(OLD, NEW),
        "source_diff": source_diff(OLD_SRC, NEW_SRC, "nightly@2", "flows/nightly.yaml"),
        "schedules": SyncResult([], ["nightly-daily"], []),
        "problems": (),
        "was_retired": False,
        "git": GitInfo("0123456789abcdef", "flows/nightly.yaml", False),
    }
    base.update(fields)
    return FlowPlan(**base)


def test_plan_lines() -> None:
    assert plan_line(_plan()) == (
        "deployed nightly revision 3 (was 2): 2 nodes changed, schedule nightly-daily updated"
    )
    added = _plan(status="added", previous=None, revision=1, change=compare_documents(None, NEW))
    assert plan_line(added).startswith("deployed nightly revision 1 (new): 2 nodes")
    unchanged = _plan(status="unchanged", revision=2, schedules=SyncResult([], [], []))
    assert plan_line(unchanged) == "nightly: up to date (revision 2)"
    removed = _plan(
        status="removed",
        name="old-flow",
        revision=None,
        path=None,
        schedules=SyncResult([], [], []),
        change=compare_documents(OLD, None),
    )
    assert plan_line(removed) == "retired old-flow (pruned)"
    again = plan_line(_plan(was_retired=True))
    assert again.endswith(
        "; it was retired and is active again: the schedules its retirement paused stay "
        "paused (resume each: cyclone-flow schedule resume SCHEDULE)"
    ), again
    back = _plan(kind="rollback", rollback_of=1, previous=2, revision=3)
    assert plan_line(back).startswith("rolled back nightly to revision 1 as revision 3 (was 2)")
    assert plan_line(back, applied=False).startswith("would roll back nightly to revision 1")


def test_a_forced_plan_says_so() -> None:
    problem = CompatProblem("schedule", "nightly-daily", "'region' is a required property")
    line = plan_line(_plan(problems=(problem,)))
    assert line.endswith("; forced past 1 compatibility problem")
    assert problem_line(problem) == (
        "schedule nightly-daily: its stored input fails the new input_schema: "
        "'region' is a required property"
    )


def test_text_diff() -> None:
    result = DeployResult((_plan(), _plan(name="other", status="unchanged")), False, "me")
    text = text_diff(result).splitlines()
    assert text[0] == "nightly: changed (revision 2 -> 3)  flows/nightly.yaml (git 0123456)"
    assert "  ~ node a: timeout none -> 30s" in text
    assert "  ~ node b: call 'm:g' -> 'm:h'" in text
    assert "  schedules: updated nightly-daily" in text
    assert "other: unchanged (revision 3)" in text
    assert text[-1] == "1 flow would change (1 changed), 1 unchanged"


def test_github_markdown_fences_hold_whatever_the_source_holds() -> None:
    result = DeployResult((_plan(),), False, "me")
    md = github_diff(result, "cyclone-flow diff")
    assert md.startswith("## cyclone-flow diff\n\n**1 flow would change (1 changed)**")
    assert "### `nightly`: changed (revision 2 -> 3)" in md
    assert "- `~ node a: timeout none -> 30s`" in md
    # the source holds ``` so the fence is longer
    assert "<details><summary>source diff</summary>\n\n````diff\n" in md
    assert md.rstrip().endswith("</details>")


def _schema_plan(old: dict[str, Any], new: dict[str, Any]) -> FlowPlan:
    change = compare_documents({**OLD, "input_schema": old}, {**OLD, "input_schema": new})
    return _plan(change=change, schedules=SyncResult([], [], []))


def test_compatible_is_claimed_only_when_every_schema_change_widens() -> None:
    old = {"type": "object", "properties": {"code": {"type": "string"}}}
    # a new optional field that refuses nothing, beside a pattern that may refuse inputs
    new = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]+$"},
            "note": {"description": "free text"},
        },
    }
    text = text_diff(DeployResult((_schema_plan(old, new),), False, "me"))
    assert "input schema: compatible" not in text, text
    assert "  input schema: breaking (no stored input fails it)" in text.splitlines(), text
    assert (
        "  ! input_schema: field 'code': pattern added: '^[A-Z]+$' (may refuse inputs the old "
        "schema accepted) (breaking)"
    ) in text.splitlines(), text
    wider = {"type": "object", "properties": {"code": {}, "note": {"description": "free"}}}
    text = text_diff(DeployResult((_schema_plan(old, wider),), False, "me"))
    assert "  input schema: compatible (inputs the old schema accepted still pass)" in (
        text.splitlines()
    ), text

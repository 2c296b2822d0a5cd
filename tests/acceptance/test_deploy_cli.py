"""Deploying flows as revisions with nothing but the CLI (issue 33): a flows folder in a real
git repository goes from ``lint`` to ``diff`` to ``deploy`` to ``submit NAME`` to ``flows
rollback`` and ``flows retire``; a lint error in one file deploys none; ``diff``'s exit
codes; ``deploy --dry-run`` writes nothing; stored inputs a new ``input_schema`` refuses;
unknown and hostile names and revisions."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import Runner, json_output, no_traceback, run_cli

from cyclone_flow import Client

ECHO = "cyclone_test_handlers.basic:echo"

V1 = f"""\
# the nightly report: comments and layout are kept byte for byte
name: nightly
input_schema:
  type: object
  properties:
    day: {{type: string, default: "2030-01-01"}}
nodes:
  first:   # the only node of revision 1
    call: {ECHO}
"""

V2 = f"""\
# the nightly report, now in two steps
name: nightly
input_schema:
  type: object
  properties:
    day: {{type: string, default: "2030-01-01"}}
nodes:
  first:
    call: {ECHO}
  second:
    call: {ECHO}
    needs: [first]
"""

DIFF_KEYS = {"applied", "by", "changed", "flows"}
PLAN_KEYS = {
    "name",
    "path",
    "status",
    "previous",
    "revision",
    "kind",
    "rollback_of",
    "was_retired",
    "git",
    "change",
    "source_diff",
    "schedules",
    "problems",
}


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(repo),
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


def _repo(tmp_path: Path, text: str) -> tuple[Path, Path]:
    """A git repository with ``flows/nightly.yaml`` committed: (repo, flows folder)."""
    repo = tmp_path / "repo"
    flows = repo / "flows"
    flows.mkdir(parents=True)
    (flows / "nightly.yaml").write_text(text, encoding="utf-8")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "nightly v1")
    return repo, flows


def _ok(proc: subprocess.CompletedProcess[str], code: int = 0) -> subprocess.CompletedProcess[str]:
    no_traceback(proc)
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def _error(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    """Exit ``code`` with an ``error: ...`` line naming ``words``, no traceback."""
    _ok(proc, code)
    assert "error:" in proc.stderr, proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr
    return proc.stderr


def test_a_flows_folder_from_git_to_rollback_and_retire(
    cli: Runner, make_client: Callable[..., Client], tmp_path: Path
) -> None:
    repo, flows = _repo(tmp_path, V1)
    path = flows / "nightly.yaml"
    first_commit = _git(repo, "rev-parse", "HEAD")

    # the pull request: lint, then what a deploy would change
    _ok(run_cli("lint", flows))
    plan = json_output(_ok(cli("diff", flows, "--json"), 1).stdout)
    assert set(plan) == DIFF_KEYS and plan["applied"] is False and plan["changed"] is True
    (flow,) = plan["flows"]
    assert set(flow) >= PLAN_KEYS, flow
    assert (flow["name"], flow["status"], flow["previous"], flow["revision"]) == (
        "nightly",
        "added",
        None,
        1,
    )
    assert flow["git"] == {"commit": first_commit, "path": "flows/nightly.yaml", "dirty": False}
    assert [n["name"] for n in flow["change"]["nodes_added"]] == ["first"]
    assert json_output(_ok(cli("diff", flows, "--format", "json"), 1).stdout) == plan
    text = _ok(cli("diff", flows), 1).stdout
    assert "nightly: added (revision 1)" in text, text
    assert "+ node first (action)" in text, text
    github = _ok(cli("diff", flows, "--format", "github"), 1).stdout
    assert "### `nightly`: added (revision 1)" in github, github
    assert "- `+ node first (action)`" in github, github
    assert "<details><summary>source diff</summary>" in github and "```diff\n" in github
    assert "+# the nightly report" in github

    # the merge: deploy records the commit
    deployed = _ok(cli("deploy", flows, "--by", "alice")).stdout
    assert deployed == "deployed nightly revision 1 (new): 1 node\n", deployed
    (rev1,) = json_output(_ok(cli("flows", "history", "nightly", "--json")).stdout)
    assert (rev1["revision"], rev1["kind"], rev1["deployed_by"], rev1["current"]) == (
        1,
        "deploy",
        "alice",
        True,
    )
    assert (rev1["git_commit"], rev1["git_path"], rev1["git_dirty"]) == (
        first_commit,
        "flows/nightly.yaml",
        False,
    )
    assert "no changes" in _ok(cli("diff", flows)).stdout  # exit 0: nothing would change
    assert _ok(cli("deploy", flows)).stdout == "nightly: up to date (revision 1)\n"

    # an edit, committed, deployed: revision 2
    path.write_text(V2, encoding="utf-8")
    _git(repo, "commit", "-q", "-am", "nightly v2")
    second_commit = _git(repo, "rev-parse", "HEAD")
    text = _ok(cli("diff", flows), 1).stdout
    assert "nightly: changed (revision 1 -> 2)" in text and "+ node second (action)" in text
    deployed = _ok(cli("deploy", flows, "--by", "bob")).stdout
    assert deployed == "deployed nightly revision 2 (was 1): 1 node added\n", deployed
    history = json_output(_ok(cli("flows", "history", "nightly", "--json")).stdout)
    assert [(r["revision"], r["current"], r["git_commit"]) for r in history] == [
        (2, True, second_commit),
        (1, False, first_commit),
    ]

    # submit by name runs the current revision
    make_client(workers=1).start()
    run = json_output(_ok(cli("submit", "nightly", "--wait", "--json")).stdout)
    assert (run["state"], run["revision"]) == ("completed", 2)
    assert [s["node"] for s in run["steps"]] == ["first", "second"]
    status = _ok(cli("status", run["id"])).stdout
    assert "revision 2" in status.splitlines()[0], status

    # rollback to 1: revision 3 with 1's content, which submit NAME then runs
    back = _ok(cli("flows", "rollback", "nightly", "--to", "1", "--by", "carol")).stdout
    assert back.startswith("rolled back nightly to revision 1 as revision 3 (was 2)"), back
    run = json_output(_ok(cli("submit", "nightly", "--wait", "--json")).stdout)
    assert (run["state"], run["revision"]) == ("completed", 3)
    assert [s["node"] for s in run["steps"]] == ["first"]
    history = json_output(_ok(cli("flows", "history", "nightly", "--json")).stdout)
    assert (history[0]["revision"], history[0]["kind"], history[0]["rollback_of"]) == (
        3,
        "rollback",
        1,
    )
    table = _ok(cli("flows", "history", "nightly")).stdout
    assert "rollback of 1" in table and first_commit[:7] in table, table
    old = json_output(_ok(cli("submit", "nightly@2", "--wait", "--json")).stdout)
    assert (old["state"], old["revision"]) == ("completed", 2)
    runs = json_output(_ok(cli("runs", "--flow", "nightly", "--revision", "2", "--json")).stdout)
    assert sorted(r["revision"] for r in runs) == [2, 2]
    assert "nightly@3" in _ok(cli("runs", "--flow", "nightly")).stdout

    # the original YAML, byte for byte; and a revision diff
    assert _ok(cli("flows", "show", "nightly@1")).stdout == V1
    assert _ok(cli("flows", "show", "nightly")).stdout == V1  # current: 3, 1's source
    shown = json_output(_ok(cli("flows", "show", "nightly@2", "--json")).stdout)
    assert (shown["revision"], shown["source"]) == (2, V2)
    diff = _ok(cli("flows", "diff", "nightly", "1", "2")).stdout
    assert "+  second:" in diff and "-# the nightly report: comments" in diff, diff
    assert "nightly: revision 1 -> 2" in diff and "+ node second (action)" in diff, diff
    assert json_output(_ok(cli("flows", "diff", "nightly", "1", "2", "--json")).stdout)

    # retire: submits by name, and of the file, are refused
    retired = _ok(cli("flows", "retire", "nightly", "--by", "dave")).stdout
    assert retired.startswith("retired nightly"), retired
    _error(cli("submit", "nightly"), 1, "nightly", "retired")
    _error(cli("submit", path), 1, "nightly", "retired")
    (listed,) = json_output(_ok(cli("flows", "list", "--json")).stdout)
    assert (listed["name"], listed["current_revision"], listed["retired"]) == ("nightly", 3, True)
    assert "retired" in _ok(cli("flows", "list")).stdout


def test_a_lint_error_in_one_of_two_files_deploys_none(cli: Runner, tmp_path: Path) -> None:
    _, flows = _repo(tmp_path, V1)
    (flows / "broken.yaml").write_text("name: broken\nnodes:\n  a: {needs: [zzz]}\n")
    lint = run_cli("lint", flows)
    assert lint.returncode == 1
    proc = _ok(cli("deploy", flows), 1)
    assert proc.stdout == lint.stdout  # the problems as `lint` prints them
    assert "problem(s) in" in proc.stderr
    github = _ok(cli("deploy", flows, "--format", "github"), 1).stdout
    assert github == run_cli("lint", flows, "--format", "github").stdout
    assert json_output(_ok(cli("flows", "list", "--json")).stdout) == []


def test_diff_exit_codes(cli: Runner, tmp_path: Path) -> None:
    _, flows = _repo(tmp_path, V1)
    _error(cli("diff", tmp_path / "missing"), 2, "does not exist")
    _ok(cli("diff", flows), 1)  # nightly would be added
    _ok(cli("deploy", flows))
    _ok(cli("diff", flows), 0)
    (flows / "broken.yaml").write_text("name: broken\nnodes: {}\n")
    proc = _ok(cli("diff", flows), 2)
    assert "broken.yaml" in proc.stdout  # the lint problems
    assert proc.stdout == run_cli("lint", flows).stdout


def test_deploy_dry_run_writes_nothing(cli: Runner, tmp_path: Path) -> None:
    _, flows = _repo(tmp_path, V1)
    proc = _ok(cli("deploy", flows, "--dry-run"))
    assert proc.stdout == cli("diff", flows).stdout
    assert "nothing was written" in proc.stderr
    assert json_output(_ok(cli("deploy", flows, "--dry-run", "--json")).stdout)["applied"] is False
    assert json_output(_ok(cli("flows", "list", "--json")).stdout) == []
    _error(cli("submit", "nightly"), 1, "nightly")


def test_a_new_required_input_refused_by_a_schedule_unless_forced(
    cli: Runner, tmp_path: Path
) -> None:
    flow = tmp_path / "report.yaml"
    flow.write_text(f"name: report\nnodes:\n  a: {{call: '{ECHO}'}}\n")
    _ok(cli("deploy", flow))
    # a schedule added by hand keeps its stored input: {} (no region)
    _ok(cli("schedule", "add", flow, "--cron", "0 2 * * *", "--input", "{}", "--name", "daily"))
    flow.write_text(
        "name: report\ninput_schema:\n  type: object\n  required: [region]\n"
        f"  properties: {{region: {{type: string}}}}\nnodes:\n  a: {{call: '{ECHO}'}}\n"
    )
    text = _ok(cli("diff", flow), 1).stdout
    assert "! schedule daily: its stored input fails" in text, text
    _error(cli("deploy", flow), 1, "report", "schedule daily", "--force")
    history = json_output(_ok(cli("flows", "history", "report", "--json")).stdout)
    assert [r["revision"] for r in history] == [1]  # nothing deployed
    forced = _ok(cli("deploy", flow, "--force")).stdout
    assert forced.startswith("deployed report revision 2 (was 1)"), forced
    assert "forced past 1 compatibility problem" in forced


def test_a_schedule_input_its_own_flow_refuses_is_a_lint_error(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "report.yaml"
    flow.write_text(
        "name: report\ninput_schema:\n  type: object\n  required: [region]\n"
        f"nodes:\n  a: {{call: '{ECHO}'}}\n"
        "schedules:\n  - {name: report-daily, cron: '0 2 * * *', input: {}}\n"
    )
    for args in (("deploy", flow), ("deploy", flow, "--force")):
        done = cli(*args)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "E053" in done.stdout + done.stderr
    _error(cli("flows", "history", "report"), 1, "report")  # nothing deployed


def test_unknown_flows_and_revisions_exit_1(cli: Runner, tmp_path: Path) -> None:
    _, flows = _repo(tmp_path, V1)
    _ok(cli("deploy", flows))
    _error(cli("flows", "history", "nope"), 1, "nope")
    _error(cli("flows", "show", "nope"), 1, "nope")
    _error(cli("flows", "show", "nightly@9"), 1, "9")
    _error(cli("flows", "diff", "nightly", "1", "9"), 1, "9")
    _error(cli("flows", "rollback", "nightly", "--to", "9"), 1, "9")
    _error(cli("flows", "retire", "nope"), 1, "nope")
    _error(cli("submit", "nope"), 1, "nope")
    _error(cli("submit", "nightly@9"), 1, "9")
    _error(cli("submit", "nightly", "--revision", "9", "--dry-run"), 1, "9")


@pytest.mark.parametrize(
    "args",
    [
        ("flows", "history", "Bad;Name"),
        ("flows", "history", "x" * 101),
        ("flows", "show", "nightly@x"),
        ("flows", "show", "nightly@"),
        ("flows", "show", "../etc/passwd"),
        ("flows", "diff", "nightly", "x"),
        ("flows", "diff", "nightly", "1", "-3"),
        ("flows", "rollback", "nightly", "--to", "abc"),
        ("flows", "rollback", "nightly", "--to", "0"),
        ("flows", "retire", "$(rm -rf /)"),
        ("submit", "nightly@two"),
        ("submit", "Nightly"),
        ("submit", "nightly", "--revision", "x"),
        ("submit", "nightly@0"),
        ("submit", "nightly@1", "--revision", "2"),
        ("flows", "show", "nightly@0"),
        ("flows", "show", "n" * 101),
        ("flows", "retire", "nightly@1"),
        ("runs", "--revision", "1"),
        ("diff", "--format", "yaml", "."),
        ("deploy", "--json", "--format", "github", "."),
    ],
)
def test_hostile_names_and_revisions_exit_2(cli: Runner, args: tuple[str, ...]) -> None:
    command, *rest = args
    _error(cli(command, *rest), 2)


TOO_BIG = str(2**31)  # one past the largest revision (a Postgres integer)


@pytest.mark.parametrize(
    "args",
    [
        ("submit", "nightly", "--revision", "99999999999"),
        ("submit", "nightly", "--revision", TOO_BIG),
        ("submit", f"nightly@{TOO_BIG}"),
        ("submit", "nightly@99999999999999999999", "--dry-run"),
        ("flows", "show", f"nightly@{TOO_BIG}"),
        ("flows", "diff", "nightly", "1", TOO_BIG),
        ("flows", "diff", "nightly", TOO_BIG),
        ("flows", "rollback", "nightly", "--to", TOO_BIG),
        ("runs", "--flow", "nightly", "--revision", TOO_BIG),
    ],
)
def test_revisions_out_of_range_are_usage_errors(
    cli: Runner, tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Not "cannot use the database: integer out of range" (exit 1): a usage error naming
    the value, before the database is asked."""
    _, flows = _repo(tmp_path, V1)
    _ok(cli("deploy", flows))
    command, *rest = args
    stderr = _error(cli(command, *rest), 2)
    assert "out of range" not in stderr and "database" not in stderr, stderr
    assert TOO_BIG in stderr or "99999999999" in stderr, stderr


def test_submit_name_beside_a_folder_of_that_name(cli: Runner, tmp_path: Path) -> None:
    """A directory is never a flow file: ``submit nightly`` where ``./nightly/`` exists
    (a flows repository often has one) submits the deployed flow."""
    _, flows = _repo(tmp_path, V1)
    _ok(cli("deploy", flows))
    here = tmp_path / "here"
    (here / "nightly").mkdir(parents=True)
    plan = json_output(_ok(cli("submit", "nightly", "--dry-run", "--json", cwd=here)).stdout)
    assert [s["node"] for s in plan["steps"]] == ["first"]
    run_id = _ok(cli("submit", "nightly", cwd=here)).stdout.strip()
    (run,) = json_output(_ok(cli("runs", "--flow", "nightly", "--revision", "1", "--json")).stdout)
    assert run["id"] == run_id
    (here / "other-folder").mkdir()
    stderr = _error(cli("submit", "./other-folder", cwd=here), 2, "is a directory")
    assert "does not exist" not in stderr, stderr


def test_submit_file_with_revision_is_a_usage_error(cli: Runner, tmp_path: Path) -> None:
    flow = tmp_path / "a.yaml"
    flow.write_text(f"name: a\nnodes:\n  a: {{call: '{ECHO}'}}\n")
    _error(cli("submit", flow, "--revision", "1"), 2, "--revision")


def test_submit_name_dry_run_previews_the_revision(cli: Runner, tmp_path: Path) -> None:
    _, flows = _repo(tmp_path, V2)
    _ok(cli("deploy", flows))
    proc = _ok(cli("submit", "nightly", "--dry-run", "--json"))
    plan: dict[str, Any] = json_output(proc.stdout)
    assert [s["node"] for s in plan["steps"]] == ["first", "second"]
    assert plan["input"] == {"day": "2030-01-01"}
    assert json_output(_ok(cli("runs", "--json")).stdout) == []

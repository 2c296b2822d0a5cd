"""Deploying flow files as revisions (issue 33): ``Client.deploy`` / ``diff`` /
``rollback`` / ``retire``, the history reads, and submitting a deployed flow by name:
atomic multi-flow deploys (lint errors, a database error mid-deploy), idempotence,
concurrent deploys, runs in flight keeping their definition, schedules synced by deploy
and rollback, the compatibility check, prune, git metadata."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import cyclone_flow
from cyclone_flow import Client, load_flow
from cyclone_flow.errors import (
    CompatibilityError,
    DeployLintError,
    FlowError,
    FlowNotDeployedError,
    FlowRetiredError,
    InputValidationError,
    LintPathError,
    RevisionNotFoundError,
    SubmitOptionError,
)

NOOP = "cyclone_test_handlers.queueing:noop"
NOW = datetime(2030, 1, 7, 12, 0, tzinfo=UTC)


def flow_text(
    name: str,
    nodes: str = "a",
    *,
    schema: str = "",
    schedules: str = "",
    comment: str = "",
) -> str:
    """A flow of ``nodes`` (space-separated, each a noop, in a chain)."""
    lines = [f"# {comment}" if comment else "# a flow", f"name: {name}"]
    if schema:
        lines.append(f"input_schema: {schema}")
    lines.append("nodes:")
    previous = None
    for node in nodes.split():
        needs = f", needs: [{previous}]" if previous else ""
        lines.append(f'  {node}: {{call: "{NOOP}"{needs}}}')
        previous = node
    if schedules:
        lines.append("schedules:")
        lines += [f"  - {entry}" for entry in schedules.strip().splitlines()]
    return "\n".join(lines) + "\n"


def write(folder: Path, name: str, text: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def steps_of(client: Client, run_id: str) -> list[str]:
    return sorted(step.node for step in client.list_steps(run_id))


# -- errors --------------------------------------------------------------------------------


def test_the_deploy_errors_are_exported_with_exit_code_1() -> None:
    for error in (
        CompatibilityError,
        DeployLintError,
        FlowNotDeployedError,
        FlowRetiredError,
        RevisionNotFoundError,
    ):
        assert getattr(cyclone_flow, error.__name__) is error
        assert error.exit_code == 1
    assert issubclass(DeployLintError, FlowError)


# -- deploy: revisions, idempotence --------------------------------------------------------


def test_deploy_stores_a_revision_and_a_redeploy_of_the_same_file_stores_none(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    text = flow_text("orders", "a b", comment="the orders flow")
    path = write(tmp_path, "orders", text)
    first = client.deploy([path], by="alice")
    assert first.applied and first.changed and first.by == "alice"
    (plan,) = first.flows
    assert (plan.name, plan.status, plan.previous, plan.revision) == ("orders", "added", None, 1)
    assert plan.change.status == "added"
    assert [n.name for n in plan.change.nodes_added] == ["a", "b"]
    stored = client.get_revision("orders")
    assert stored.source == text  # the comment kept
    assert (stored.revision, stored.deployed_by, stored.kind, stored.current) == (
        1,
        "alice",
        "deploy",
        True,
    )
    assert stored.source_path == path

    again = client.deploy([path], by="bob")
    assert not again.changed
    (plan,) = again.flows
    assert (plan.status, plan.previous, plan.revision) == ("unchanged", 1, 1)
    assert [r.revision for r in client.flow_history("orders")] == [1]
    flows = client.list_deployed_flows()
    assert [(f.name, f.current_revision, f.deployed_by) for f in flows] == [("orders", 1, "alice")]

    # a comment-only change: a new revision whose definition did not change
    Path(path).write_text(text.replace("the orders flow", "the orders flow, reworded"))
    third = client.deploy([path], by="carol")
    (plan,) = third.flows
    assert (plan.status, plan.previous, plan.revision) == ("changed", 1, 2)
    assert plan.change.status == "unchanged"
    assert "reworded" in plan.source_diff
    assert [r.revision for r in client.flow_history("orders")] == [2, 1]
    assert client.get_revision("orders").source == Path(path).read_text()
    assert client.get_revision("orders", 1).source == text


def test_a_lint_error_in_one_file_deploys_no_flow(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    write(tmp_path / "flows", "good", flow_text("good"))
    write(tmp_path / "flows", "bad", "name: bad\nnodes:\n  a: {call: 42}\n")
    with pytest.raises(DeployLintError) as caught:
        client.deploy([str(tmp_path / "flows")])
    assert any(p.path.endswith("bad.yaml") for p in caught.value.problems)
    assert client.list_deployed_flows() == []
    with pytest.raises(LintPathError):
        client.deploy([str(tmp_path / "missing")])


def test_two_files_declaring_one_flow_name_are_a_lint_error(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    first = write(tmp_path, "one", flow_text("same"))
    write(tmp_path, "two", flow_text("same", "b"))
    with pytest.raises(DeployLintError) as caught:
        client.deploy([str(tmp_path)])
    (problem,) = caught.value.problems
    assert problem.code == "E060"
    assert problem.message == f"flow name same is also declared in {first}"
    assert client.list_deployed_flows() == []


def test_a_database_error_mid_deploy_leaves_every_flow_and_schedule_as_it_was(
    make_client: Callable[..., Client], db: Any, tmp_path: Path
) -> None:
    client = make_client()
    alpha = write(
        tmp_path, "alpha", flow_text("alpha", schedules='{name: a-hourly, cron: "0 * * * *"}')
    )
    beta = write(tmp_path, "beta", flow_text("beta"))
    client.deploy([str(tmp_path)], now=NOW)
    before = client.list_schedules()
    # alpha changes (a node, its schedule's cron), beta too; beta's revision fails
    write(
        tmp_path,
        "alpha",
        flow_text("alpha", "a x", schedules='{name: a-hourly, cron: "5 * * * *"}'),
    )
    write(tmp_path, "beta", flow_text("beta", "a y"))
    db.execute(
        """CREATE FUNCTION deploy_boom() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF NEW.flow_name = 'beta' THEN RAISE EXCEPTION 'boom on beta'; END IF;
             RETURN NEW;
           END $$"""
    )
    db.execute(
        "CREATE TRIGGER deploy_boom BEFORE INSERT ON cyclone_flow_revisions"
        " FOR EACH ROW EXECUTE FUNCTION deploy_boom()"
    )
    try:
        with pytest.raises(psycopg.errors.RaiseException, match="boom on beta"):
            client.deploy([alpha, beta], now=NOW)
    finally:
        db.execute("DROP TRIGGER deploy_boom ON cyclone_flow_revisions")
        db.execute("DROP FUNCTION deploy_boom()")
    assert [(f.name, f.current_revision) for f in client.list_deployed_flows()] == [
        ("alpha", 1),
        ("beta", 1),
    ]
    assert [r.revision for r in client.flow_history("alpha")] == [1]
    assert client.list_schedules() == before
    # and with the trigger gone, the same deploy goes through
    result = client.deploy([alpha, beta], now=NOW)
    assert [(p.name, p.revision) for p in result.flows] == [("alpha", 2), ("beta", 2)]
    assert result.flows[0].schedules.updated == ["a-hourly"]


# -- concurrency ---------------------------------------------------------------------------


def _race(clients: list[Client], jobs: list[Callable[[Client], Any]]) -> list[Any]:
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            barrier.wait(10)
            results[i] = jobs[i](clients[i])
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_concurrent_deploys_serialise_and_end_consistent(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    clients = [make_client(), make_client()]
    # different content, several rounds: a deploy writes a revision unless the other
    # one's content is current when it runs (the second of a round never is)
    paths = [write(tmp_path / f"d{i}", "shared", flow_text("shared", f"n{i}")) for i in range(2)]
    written = 0
    for _ in range(4):
        results = _race(clients, [lambda c, p=p: c.deploy([p]) for p in paths])
        assert all(not isinstance(r, BaseException) for r in results), results
        statuses = sorted(r.flows[0].status for r in results)
        assert statuses in (["added", "changed"], ["changed", "changed"], ["changed", "unchanged"])
        written += sum(r.flows[0].status != "unchanged" for r in results)
    history = clients[0].flow_history("shared")
    assert sorted(r.revision for r in history) == list(range(1, written + 1))  # dense
    assert [r.revision for r in history if r.current] == [written]
    (flow,) = clients[0].list_deployed_flows()
    assert flow.current_revision == written
    current = clients[0].get_revision("shared")
    assert current.digest == flow.digest
    assert current.source == Path(paths[0 if "n0" in current.source else 1]).read_text()

    # the same content at once: one revision, the other deploy finds it unchanged
    same = [write(tmp_path / f"s{i}", "twin", flow_text("twin", "a b")) for i in range(2)]
    results = _race(clients, [lambda c, p=p: c.deploy([p]) for p in same])
    assert all(not isinstance(r, BaseException) for r in results), results
    assert sorted(r.flows[0].status for r in results) == ["added", "unchanged"]
    assert [r.revision for r in clients[0].flow_history("twin")] == [1]


# -- runs in flight ------------------------------------------------------------------------


def test_runs_in_flight_finish_on_their_own_definition(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    path = write(
        tmp_path,
        "inflight",
        f"""name: inflight
nodes:
  gate: {{type: wait_signal, signal: go}}
  a: {{call: "{NOOP}", needs: [gate]}}
""",
    )
    client.deploy([path])
    old_run = client.submit("inflight", {"n": 1})
    assert steps_of(client, old_run) == ["a", "gate"]
    write(tmp_path, "inflight", flow_text("inflight", "b c"))
    assert client.deploy([path]).flows[0].revision == 2
    new_run = client.submit("inflight", {"n": 2})
    assert client.signal(old_run, "go") == "gate"
    client.start()
    assert client.wait(old_run, timeout=30).state == "completed"
    assert client.wait(new_run, timeout=30).state == "completed"
    assert steps_of(client, old_run) == ["a", "gate"]  # rev 1's nodes
    assert steps_of(client, new_run) == ["b", "c"]
    assert (client.get_run(old_run).revision, client.get_run(new_run).revision) == (1, 2)


# -- schedules -----------------------------------------------------------------------------


def test_deploy_and_rollback_sync_the_schedules_of_a_flow(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    v1 = flow_text(
        "nightly",
        schedules='{name: hourly, cron: "0 * * * *"}\n{name: daily, cron: "0 2 * * *"}',
    )
    path = write(tmp_path, "nightly", v1)
    result = client.deploy([path], now=NOW)
    assert result.flows[0].schedules.added == ["hourly", "daily"]
    hourly = client.get_schedule("hourly")
    assert hourly is not None and hourly.revision == 1 and hourly.source == "flow"
    manual = client.add_schedule(load_flow(path), "15 3 * * *", name="by-hand", now=NOW)
    assert client.get_schedule(manual).revision is None  # type: ignore[union-attr]

    write(
        tmp_path,
        "nightly",
        flow_text(
            "nightly",
            "a b",
            schedules='{name: hourly, cron: "30 * * * *"}\n{name: weekly, cron: "0 4 * * 1"}',
        ),
    )
    plan = client.deploy([path], now=NOW).flows[0]
    assert plan.revision == 2
    assert (plan.schedules.added, sorted(plan.schedules.updated), plan.schedules.removed) == (
        ["weekly"],
        ["by-hand", "hourly"],
        ["daily"],
    )
    changed = client.get_schedule("hourly")
    assert changed is not None and changed.id == hourly.id  # the row is kept
    assert (changed.cron, changed.revision) == ("30 * * * *", 2)
    assert client.get_schedule("daily") is None
    assert client.get_schedule("by-hand").revision == 2  # type: ignore[union-attr]

    back = client.rollback("nightly", 1, by="ops", now=NOW)
    assert (back.kind, back.rollback_of, back.revision, back.previous) == ("rollback", 1, 3, 2)
    assert back.schedules.added == ["daily"] and back.schedules.removed == ["weekly"]
    rows = {s.name: s for s in client.list_schedules()}
    assert sorted(rows) == ["by-hand", "daily", "hourly"]
    assert rows["hourly"].cron == "0 * * * *" and rows["hourly"].id == hourly.id
    assert {s.revision for s in rows.values()} == {3}
    latest = client.get_revision("nightly")
    assert (latest.revision, latest.kind, latest.rollback_of, latest.source) == (
        3,
        "rollback",
        1,
        v1,
    )
    assert client.load_revision("nightly").nodes.keys() == {"a"}

    # the ticks of a deployed schedule record its revision and run its definition
    submitted = client.schedule_scanner.run_once(now=NOW + timedelta(hours=1, minutes=1))
    assert submitted.submitted >= 1
    ticked = client.list_runs(flow="nightly", revision=3)
    assert ticked and all(r.revision == 3 for r in ticked)
    assert steps_of(client, ticked[0].id) == ["a"]
    assert client.list_runs(flow="nightly", revision=2) == []
    history = {r.revision: r.runs for r in client.flow_history("nightly")}
    assert history[3] == len(ticked) and history[2] == 0


# -- compatibility -------------------------------------------------------------------------

OPEN_SCHEMA = "{type: object, properties: {region: {type: string}}}"
REQUIRED_SCHEMA = (
    "{type: object, properties: {region: {type: string}, customer: {type: string}},"
    " required: [customer]}"
)


def test_a_new_required_input_that_a_stored_input_lacks_is_refused_unless_forced(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    path = write(
        tmp_path,
        "billing",
        flow_text(
            "billing",
            schema=OPEN_SCHEMA,
            schedules='{name: file-sched, cron: "0 * * * *", input: {customer: acme}}',
        ),
    )
    client.deploy([path], now=NOW)
    client.add_schedule(load_flow(path), "0 5 * * *", input={"region": "eu"}, name="manual-eu")
    waiting = client.submit("billing", {"region": "us"}, delay=3600)
    write(
        tmp_path,
        "billing",
        flow_text(
            "billing",
            schema=REQUIRED_SCHEMA,
            schedules='{name: file-sched, cron: "0 * * * *", input: {customer: acme}}',
        ),
    )
    with pytest.raises(CompatibilityError) as caught:
        client.deploy([path], now=NOW)
    problems = caught.value.problems
    assert [(p.kind, p.name) for p in problems] == [("schedule", "manual-eu"), ("run", waiting)]
    assert "customer" in problems[0].message
    assert "manual-eu" in str(caught.value) and waiting in str(caught.value)
    assert not caught.value.result.applied
    assert [r.revision for r in client.flow_history("billing")] == [1]
    assert client.get_schedule("manual-eu").revision is None  # type: ignore[union-attr]

    # diff reports them without raising; a dry run raises as deploy does
    preview = client.diff([path], now=NOW)
    assert preview.problems == problems and not preview.applied
    assert preview.flows[0].change.breaking
    with pytest.raises(CompatibilityError):
        client.deploy([path], dry_run=True, now=NOW)

    forced = client.deploy([path], force=True, now=NOW)
    assert forced.flows[0].revision == 2 and forced.problems == problems
    assert client.get_schedule("manual-eu").revision == 2  # type: ignore[union-attr]


def test_a_file_schedule_whose_input_fails_its_own_schema_is_a_lint_error(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    path = write(
        tmp_path,
        "strict",
        flow_text("strict", schema=REQUIRED_SCHEMA, schedules='{name: lacking, cron: "0 * * * *"}'),
    )
    for force in (False, True):  # every tick would fail: not a thing to force
        with pytest.raises(DeployLintError) as caught:
            client.deploy([path], force=force, now=NOW)
        assert [p.code for p in caught.value.problems] == ["E053"]
    assert client.list_deployed_flows() == []


# -- diff, prune ---------------------------------------------------------------------------


def test_diff_says_per_flow_what_a_deploy_would_change_and_writes_nothing(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    alpha = write(tmp_path, "alpha", flow_text("alpha"))
    beta = write(tmp_path, "beta", flow_text("beta", "a b"))
    client.deploy([alpha, beta])
    assert not client.diff([alpha, beta]).changed

    write(tmp_path, "beta", flow_text("beta", "a c").replace("c: {", "c: {timeout: 30s, "))
    gamma = write(tmp_path, "gamma", flow_text("gamma"))
    result = client.diff([alpha, beta, gamma])
    assert result.changed and not result.applied
    by_name = {p.name: p for p in result.flows}
    assert {n: p.status for n, p in by_name.items()} == {
        "alpha": "unchanged",
        "beta": "changed",
        "gamma": "added",
    }
    beta_plan = by_name["beta"]
    assert (beta_plan.previous, beta_plan.revision) == (1, 2)
    assert [n.name for n in beta_plan.change.nodes_added] == ["c"]
    assert [n.name for n in beta_plan.change.nodes_removed] == ["b"]
    assert "+  c:" in beta_plan.source_diff
    assert by_name["gamma"].revision == 1
    out = result.to_json()
    assert set(out) == {"applied", "by", "changed", "flows"}
    assert set(out["flows"][0]) == {  # type: ignore[index]
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
    # nothing written
    assert [f.name for f in client.list_deployed_flows()] == ["alpha", "beta"]
    assert [r.revision for r in client.flow_history("beta")] == [1]
    # the dry run of deploy is the same
    assert client.deploy([alpha, beta, gamma], dry_run=True).to_json() == out | {
        "by": client.deploy([alpha], dry_run=True).by
    }


def test_prune_retires_the_deployed_flows_absent_from_the_call(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    alpha = write(tmp_path, "alpha", flow_text("alpha"))
    beta = write(
        tmp_path, "beta", flow_text("beta", schedules='{name: b-sched, cron: "0 * * * *"}')
    )
    client.deploy([alpha, beta], now=NOW)
    client.add_schedule(load_flow(beta), "0 6 * * *", name="b-manual", now=NOW)

    preview = client.diff([alpha], prune=True)
    assert [(p.name, p.status) for p in preview.flows] == [
        ("alpha", "unchanged"),
        ("beta", "removed"),
    ]
    assert client.get_deployed_flow("beta").retired_at is None  # type: ignore[union-attr]
    assert not client.diff([alpha]).changed  # without prune an absent flow is left alone

    result = client.deploy([alpha], prune=True, now=NOW)
    removed = result.flows[1]
    assert (removed.name, removed.status, removed.previous, removed.revision) == (
        "beta",
        "removed",
        1,
        None,
    )
    assert removed.schedules.removed == ["b-sched"]
    assert removed.change.status == "removed"
    assert client.get_deployed_flow("beta").retired_at is not None  # type: ignore[union-attr]
    assert client.get_schedule("b-sched") is None
    assert client.get_schedule("b-manual").paused  # type: ignore[union-attr]
    with pytest.raises(FlowRetiredError):
        client.submit("beta")
    # pruning again finds nothing more to retire
    assert [p.status for p in client.deploy([alpha], prune=True).flows] == ["unchanged"]


# -- submit by name ------------------------------------------------------------------------


def test_submit_by_name_runs_the_current_or_the_given_revision(
    make_client: Callable[..., Client], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client()
    path = write(tmp_path, "report", flow_text("report", "a", schema=OPEN_SCHEMA))
    client.deploy([path])
    write(tmp_path, "report", flow_text("report", "b", schema=OPEN_SCHEMA))
    client.deploy([path])
    monkeypatch.chdir(tmp_path)  # "report" is no path here ("report.yaml" is)

    current = client.submit("report", {"region": "eu"})
    assert client.get_run(current).revision == 2 and steps_of(client, current) == ["b"]
    at_one = client.submit("report@1")
    assert client.get_run(at_one).revision == 1 and steps_of(client, at_one) == ["a"]
    keyword = client.submit("report", revision=1)
    assert client.get_run(keyword).revision == 1
    assert client.get_run(keyword).flow_name == "report"
    assert client.submit("report@2", revision=2)  # both, the same one

    with pytest.raises(SubmitOptionError):
        client.submit("report@1", revision=2)
    with pytest.raises(InputValidationError):
        client.submit("report", {"region": 5})
    with pytest.raises(FlowNotDeployedError):
        client.submit("nosuch")
    with pytest.raises(RevisionNotFoundError) as caught:
        client.submit("report@9")
    assert (caught.value.name, caught.value.revision) == ("report", 9)
    with pytest.raises(SubmitOptionError):
        client.submit(load_flow(path), revision=1)
    with pytest.raises(SubmitOptionError):
        client.submit(path, revision=1)
    assert client.get_run(client.submit(path)).revision is None  # a file: no revision

    assert {r.id for r in client.list_runs(flow="report", revision=1)} == {at_one, keyword}
    history = {r.revision: r.runs for r in client.flow_history("report")}
    assert history == {1: 2, 2: 2}


def test_a_name_that_is_an_existing_path_is_a_file(
    make_client: Callable[..., Client], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client()
    monkeypatch.chdir(tmp_path)
    Path("plain").write_text(flow_text("plain"))
    run = client.submit("plain")
    assert client.get_run(run).revision is None
    with pytest.raises(SubmitOptionError):
        client.submit("plain", revision=1)


def test_retire_refuses_submits_by_name_and_pauses_schedules_until_a_deploy(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    path = write(
        tmp_path, "old", flow_text("old", schedules='{name: old-sched, cron: "0 * * * *"}')
    )
    client.deploy([path], now=NOW)
    running = client.submit("old")
    done = client.retire("old", by="ops")
    assert (done.name, done.retired, done.paused) == ("old", True, ("old-sched",))
    flow = client.get_deployed_flow("old")
    assert flow is not None and flow.retired_by == "ops"
    with pytest.raises(FlowRetiredError, match="retired"):
        client.submit("old")
    assert client.retire("old").retired is False
    with pytest.raises(FlowNotDeployedError):
        client.retire("never")
    client.start()
    assert client.wait(running, timeout=30).state == "completed"  # runs go on

    again = client.deploy([path], now=NOW).flows[0]
    assert (again.status, again.was_retired, again.revision) == ("changed", True, 2)
    assert client.get_deployed_flow("old").retired_at is None  # type: ignore[union-attr]
    assert client.get_run(client.submit("old")).revision == 2


# -- reads ---------------------------------------------------------------------------------


def test_history_reads_and_revision_diffs(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    path = write(tmp_path, "hist", flow_text("hist", "a"))
    client.deploy([path])
    write(tmp_path, "hist", flow_text("hist", "a b"))
    client.deploy([path])
    diff = client.diff_revisions("hist", 1)
    assert (diff.name, diff.old, diff.new) == ("hist", 1, 2)
    assert [n.name for n in diff.change.nodes_added] == ["b"]
    assert diff.source_diff.startswith("--- hist@1\n+++ hist@2\n")
    assert set(diff.to_json()) == {"name", "old", "new", "change", "source_diff"}
    assert client.load_revision("hist", 1).nodes.keys() == {"a"}
    assert client.get_deployed_flow("nosuch") is None
    with pytest.raises(FlowNotDeployedError):
        client.flow_history("nosuch")
    with pytest.raises(FlowNotDeployedError):
        client.get_revision("nosuch")
    with pytest.raises(RevisionNotFoundError):
        client.get_revision("hist", 7)
    with pytest.raises(RevisionNotFoundError):
        client.diff_revisions("hist", 1, 7)
    with pytest.raises(RevisionNotFoundError):
        client.rollback("hist", 7)
    dry = client.rollback("hist", 1, dry_run=True)
    assert (dry.revision, dry.status, dry.kind) == (3, "changed", "rollback")
    assert [r.revision for r in client.flow_history("hist")] == [2, 1]


# -- git -----------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_deploy_records_the_git_commit_path_and_dirty_flag(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    repo = tmp_path / "repo"
    path = write(repo / "flows", "tracked", flow_text("tracked"))
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
        )
        return done.stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "flows")
    head = git("rev-parse", "HEAD")
    plan = client.deploy([path]).flows[0]
    assert plan.git is not None and (plan.git.commit, plan.git.path, plan.git.dirty) == (
        head,
        "flows/tracked.yaml",
        False,
    )
    assert plan.to_json()["git"] == {"commit": head, "path": "flows/tracked.yaml", "dirty": False}
    stored = client.get_revision("tracked")
    assert (stored.git_commit, stored.git_path, stored.git_dirty) == (
        head,
        "flows/tracked.yaml",
        False,
    )
    Path(path).write_text(flow_text("tracked", comment="edited, not committed"))
    client.deploy([path])
    edited = client.get_revision("tracked")
    assert (edited.revision, edited.git_commit, edited.git_dirty) == (2, head, True)
    outside = write(tmp_path / "loose", "loose", flow_text("loose"))
    assert client.deploy([outside]).flows[0].git is None
    assert client.get_revision("loose").git_commit is None


def test_deploy_takes_one_path_or_path_objects_as_well_as_strings(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    folder = tmp_path / "flows"
    write(folder, "one", flow_text("one"))
    write(folder, "two", flow_text("two"))
    # one str is one path (a folder here), never a sequence of characters
    assert [f.status for f in client.diff(str(folder)).flows] == ["added", "added"]
    # path objects, alone or in a list: stored with their path as text
    result = client.deploy(folder / "one.yaml", by="t")
    assert [(f.name, f.path) for f in result.flows] == [("one", str(folder / "one.yaml"))]
    result = client.deploy([folder], by="t")
    assert [(f.name, f.status) for f in result.flows] == [("one", "unchanged"), ("two", "added")]
    assert client.get_revision("two").source_path == str(folder / "two.yaml")


def test_a_retired_flow_gets_no_run_through_its_schedules(
    make_client: Callable[..., Client], tmp_path: Path, db: Any
) -> None:
    client = make_client()
    path = write(
        tmp_path, "gone", flow_text("gone", schedules='{name: gone-sched, cron: "0 * * * *"}')
    )
    client.deploy([path], now=NOW)
    client.retire("gone")
    # trigger, resume, add and sync are submits of the flow too: refused
    with pytest.raises(FlowRetiredError):
        client.trigger_schedule("gone-sched", now=NOW)
    with pytest.raises(FlowRetiredError):
        client.resume_schedule("gone-sched", now=NOW)
    with pytest.raises(FlowRetiredError):
        client.add_schedule(path, "*/5 * * * *", name="gone-extra", now=NOW)
    with pytest.raises(FlowRetiredError):
        client.sync_schedules(path, now=NOW)
    assert [s.name for s in client.list_schedules()] == ["gone-sched"]
    # resumed behind the engine's back (by hand in SQL): the scanner submits no tick
    db.execute("UPDATE cyclone_schedules SET paused = false")
    result = client.schedule_scanner.run_once(now=NOW + timedelta(hours=2))
    assert (result.submitted, result.failed) == (0, 1)
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone()[0] == 0
    # deployed again: its schedules can be resumed and tick
    client.deploy([path], now=NOW)
    client.resume_schedule("gone-sched", now=NOW)
    run_id = client.trigger_schedule("gone-sched", now=NOW)
    assert client.get_run(run_id).revision == 2

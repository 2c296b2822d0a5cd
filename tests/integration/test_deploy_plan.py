"""The plan of a deploy (issue 33 review): ``diff`` and dry runs only read (no lock, no
identity consumed, a SELECT-only role can diff), the schedule plan reports real changes
only and agrees between diff and deploy, a redeploy of unchanged files restores removed
schedules, and the waiting-runs check ignores runs with a step that started."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from helpers.engine import database
from test_deploy import NOW, flow_text, write

from cyclone_flow import Client, load_flow
from cyclone_flow.db import flow_revisions
from cyclone_flow.engine import claim as engine_claim
from cyclone_flow.engine.fail import give_back_step_alone

SEQUENCES = (
    "SELECT sequencename, last_value FROM pg_sequences"
    " WHERE schemaname = current_schema()"
    " AND sequencename IN ('cyclone_workflows_id_seq', 'cyclone_schedules_id_seq')"
    " ORDER BY sequencename"
)


def _changed_pair(tmp_path: Path, client: Client) -> str:
    """``nightly`` deployed with a schedule, then its file changed (a node, a cron)."""
    path = write(
        tmp_path, "nightly", flow_text("nightly", schedules='{name: hourly, cron: "0 * * * *"}')
    )
    client.deploy([path], now=NOW)
    write(
        tmp_path,
        "nightly",
        flow_text(
            "nightly",
            "a b",
            schedules='{name: hourly, cron: "5 * * * *"}\n{name: daily, cron: "0 2 * * *"}',
        ),
    )
    return path


def test_diff_consumes_no_identity_value(
    make_client: Callable[..., Client], tmp_path: Path, db: Any
) -> None:
    client = make_client()
    path = _changed_pair(tmp_path, client)
    before = db.execute(SEQUENCES).fetchall()
    assert len(before) == 2
    result = client.diff([path])
    assert result.changed and result.flows[0].revision == 2
    client.deploy([path], dry_run=True)
    client.rollback("nightly", 1, dry_run=True)
    assert db.execute(SEQUENCES).fetchall() == before


def test_diff_takes_no_lock(make_client: Callable[..., Client], tmp_path: Path, db: Any) -> None:
    client = make_client()
    path = _changed_pair(tmp_path, client)
    db.execute("BEGIN")
    db.execute("LOCK TABLE cyclone_flows IN SHARE ROW EXCLUSIVE MODE")
    try:
        done: list[Any] = []
        thread = threading.Thread(target=lambda: done.append(client.diff([path])), daemon=True)
        thread.start()
        thread.join(timeout=5)
        assert done and done[0].changed, "diff waited for the deploy lock"
        ro = client.deploy([path], dry_run=True)
        assert ro.flows[0].revision == 2
        assert client.rollback("nightly", 1, dry_run=True).status == "unchanged"
    finally:
        db.execute("ROLLBACK")


def test_a_select_only_role_can_diff(
    make_client: Callable[..., Client], tmp_path: Path, db: Any, database_url: str, schema: str
) -> None:
    client = make_client()
    path = _changed_pair(tmp_path, client)
    role = f"cyclone_ro_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE ROLE {role} LOGIN")
    try:
        db.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
        db.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {role}')
        url = psycopg.conninfo.make_conninfo(database_url, options=f"-c role={role}")
        reader = Client(url, schema=schema)
        try:
            plan = reader.diff([path]).flows[0]
            assert (plan.status, plan.previous, plan.revision) == ("changed", 1, 2)
            assert (plan.schedules.added, plan.schedules.updated) == (["daily"], ["hourly"])
            assert reader.rollback("nightly", 1, dry_run=True).status == "unchanged"
        finally:
            reader.shutdown(timeout=2.0)
    finally:
        db.execute(f'REVOKE ALL ON ALL TABLES IN SCHEMA "{schema}" FROM {role}')
        db.execute(f'REVOKE ALL ON SCHEMA "{schema}" FROM {role}')
        db.execute(f"DROP ROLE {role}")


def test_a_schedule_that_only_follows_its_flow_is_not_reported_updated(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    sched = '{name: hourly, cron: "0 * * * *"}\n{name: daily, cron: "0 2 * * *", input: {}}'
    path = write(tmp_path, "nightly", flow_text("nightly", schedules=sched))
    client.deploy([path], now=NOW)
    # a new node, the same schedules: they follow the flow to revision 2, nothing else
    write(tmp_path, "nightly", flow_text("nightly", "a b", schedules=sched))
    planned = client.diff([path]).flows[0]
    assert planned.status == "changed"
    assert (planned.schedules.added, planned.schedules.updated, planned.schedules.removed) == (
        [],
        [],
        [],
    )
    done = client.deploy([path], now=NOW).flows[0]
    assert done.schedules == planned.schedules
    assert {s.revision for s in client.list_schedules()} == {2}


def test_diff_and_deploy_agree_on_the_schedule_plan(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    path = _changed_pair(tmp_path, client)
    planned = client.diff([path]).flows[0].schedules
    assert (planned.added, planned.updated, planned.removed) == (["daily"], ["hourly"], [])
    assert client.deploy([path], now=NOW).flows[0].schedules == planned
    # a file schedule out of sync (schedule sync of the file: no revision) is updated
    client.sync_schedules(load_flow(path), now=NOW)
    assert client.get_schedule("hourly").revision is None  # type: ignore[union-attr]
    plan = client.diff([path])
    assert plan.flows[0].status == "unchanged" and plan.changed
    assert sorted(plan.flows[0].schedules.updated) == ["daily", "hourly"]
    done = client.deploy([path], now=NOW)
    assert done.flows[0].schedules == plan.flows[0].schedules
    assert {s.revision for s in client.list_schedules()} == {2}
    assert not client.diff([path]).changed


def test_a_redeploy_of_unchanged_files_restores_a_removed_schedule(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    path = write(
        tmp_path, "nightly", flow_text("nightly", schedules='{name: hourly, cron: "0 * * * *"}')
    )
    client.deploy([path], now=NOW)
    client.remove_schedule("hourly")
    diff = client.diff([path])
    assert diff.changed and diff.flows[0].status == "unchanged"
    assert diff.flows[0].schedules.added == ["hourly"]
    result = client.deploy([path], now=NOW)
    (plan,) = result.flows
    assert (plan.status, plan.revision, plan.schedules.added) == ("unchanged", 1, ["hourly"])
    restored = client.get_schedule("hourly")
    assert restored is not None and restored.revision == 1
    assert [r.revision for r in client.flow_history("nightly")] == [1]
    assert not client.diff([path]).changed


def test_a_run_whose_step_was_given_back_is_not_waiting(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    path = write(tmp_path, "nightly", flow_text("nightly"))
    client.deploy([path])
    run_id = client.submit("nightly", {})
    db = database(client)
    with db.autocommit_session() as s:
        (step,) = engine_claim.claim(s, "w1", 30.0, ["default"], 10, skip_calls=[])
    assert step.run_id == run_id
    given = give_back_step_alone(
        db,
        step_id=step.id,
        generation=step.lease_generation,
        owner="w1",
        reason="no live worker can import it",
        delay_s=60,
    )
    assert given == "default"
    with db.session() as s:
        waiting = flow_revisions.revision_list_waiting_runs(s, flow_name="nightly", limit=10)
    assert waiting == []
    # a run never started that waits for its run_at is waiting
    later = client.submit("nightly", {}, run_at=NOW)
    with db.session() as s:
        waiting = flow_revisions.revision_list_waiting_runs(s, flow_name="nightly", limit=10)
    assert [str(w.id) for w in waiting] == [later]

"""The health advisor's advice, from reports built by hand: each check warns
past its threshold only, and each warning names its fix."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from cyclone_flow.advisor import ClaimProbe, HealthReport, Thresholds, advise
from cyclone_flow.db.rows import (
    ConnectionBudget,
    HeldSequence,
    IndexSize,
    OpenTransaction,
    OrphanedLeases,
    QueueStats,
    ReclaimedStep,
    TableHealth,
    XminHolder,
)
from cyclone_flow.durations import format_span
from cyclone_flow.states import StepState

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _table(name: str, **kw: Any) -> TableHealth:
    values: dict[str, Any] = {
        "table_name": name,
        "live": 1000,
        "dead": 0,
        "last_autovacuum": NOW,
        "last_vacuum": None,
        "last_autoanalyze": NOW,
        "last_analyze": None,
        "autovacuum_count": 1,
        "autovacuum_enabled": True,
        "total_bytes": 1 << 20,
        "options": "fillfactor=90",
    }
    values.update(kw)
    return TableHealth(**values)


def _healthy(**kw: Any) -> HealthReport:
    values: dict[str, Any] = {
        "schema": "app",
        "tables": [_table("cyclone_runs"), _table("cyclone_steps")],
        "transactions": [],
        "xmin_holders": [],
        "claim_index": IndexSize(bytes=16384, pages=2, entries=0),
        "claim_index_bloat": 1.0,
        "claims": [ClaimProbe("default", 10.0, True, 0, 2, 0.05)],
        "queues": [],
        "reclaimed": [],
        "sequences": [],
        "orphaned_leases": [],
        "schema_version": 12,
        "code_version": 12,
        "connections": ConnectionBudget(100, 3, 10, 1, 8),
        "pool_reserve": 6,
    }
    values.update(kw)
    return HealthReport(**values)


def _checks(report: HealthReport) -> list[tuple[str, str]]:
    return [(a.check, a.subject) for a in advise(report)]


def _transaction(pid: int, age_s: float, holds: bool) -> OpenTransaction:
    return OpenTransaction(
        pid=pid,
        datname="app",
        usename="reporting",
        application_name="metabase",
        client_addr=None,
        state="idle in transaction",
        backend_type="client backend",
        xact_start=NOW,
        query_start=NOW,
        age_s=age_s,
        holds_xmin=holds,
        xmin_age=5000,
        query="SELECT ...",
    )


def test_a_healthy_report_has_no_advice() -> None:
    assert advise(_healthy()) == []
    assert _healthy().healthy and _healthy().to_json()["healthy"] is True


def test_a_transaction_holding_the_horizon_names_its_pid_application_and_fix() -> None:
    report = _healthy(transactions=[_transaction(4242, 14 * 60, True)])
    [advice] = advise(report)
    assert advice.check == "open_transaction" and advice.subject == "pid 4242"
    assert "application metabase" in advice.message and "14 min 00 s" in advice.message
    assert "prevents vacuum of cyclone_steps" in advice.message
    assert "pg_terminate_backend(4242)" in advice.fix
    assert report.oldest_transaction_s == 14 * 60
    without_snapshot = advise(_healthy(transactions=[_transaction(7, 600, False)]))
    assert "does not hold back vacuum" in without_snapshot[0].message


def test_dead_tuples_warn_past_both_thresholds_and_point_at_the_horizon_first() -> None:
    bloated = _table("cyclone_steps", live=100_000, dead=400_000)
    report = _healthy(
        tables=[_table("cyclone_runs"), bloated],
        transactions=[_transaction(9, 900, True)],
    )
    dead = [a for a in advise(report) if a.check == "dead_tuples"]
    assert [a.subject for a in dead] == ["cyclone_steps"]
    assert "400000 dead tuples (80%" in dead[0].message
    assert dead[0].fix.startswith("end the transaction holding the xmin horizon first (pid 9)")
    assert "autovacuum_vacuum_scale_factor = 0.01" in dead[0].fix
    few = _table("cyclone_steps", live=10, dead=90)  # 90% but under min_dead
    assert _checks(_healthy(tables=[few])) == []
    assert _checks(_healthy(tables=[few], thresholds=Thresholds(min_dead=50))) == [
        ("dead_tuples", "cyclone_steps")
    ]


def test_autovacuum_off_names_the_reset() -> None:
    off = _table("cyclone_steps", autovacuum_enabled=False, options="autovacuum_enabled=false")
    [advice] = advise(_healthy(tables=[off]))
    assert advice.check == "autovacuum" and "autovacuum_enabled=false" in advice.message
    assert advice.fix.startswith("ALTER TABLE app.cyclone_steps RESET (autovacuum_enabled)")


def test_slots_and_old_prepared_transactions_hold_the_horizon() -> None:
    report = _healthy(
        xmin_holders=[
            XminHolder("slot", "standby_1", False, 90_000, None),
            XminHolder("prepared", "tx-1", False, 10, 3600.0),
            XminHolder("prepared", "tx-2", False, 10, 5.0),  # younger than xact_age_s
        ]
    )
    assert _checks(report) == [("xmin_holder", "slot standby_1"), ("xmin_holder", "prepared tx-1")]
    fixes = [a.fix for a in advise(report)]
    assert "pg_drop_replication_slot('standby_1')" in fixes[0]
    assert "ROLLBACK PREPARED 'tx-1'" in fixes[1]


def test_claim_index_bloat_plan_and_cost() -> None:
    big = IndexSize(bytes=64 << 20, pages=8192, entries=1000)
    report = _healthy(
        claim_index=big,
        claim_index_bloat=500.0,
        claims=[ClaimProbe("default", 9e5, False, 10, 50_000, 80.0)],
        queues=[QueueStats("default", 5000, 0, 0, 1.0)],
    )
    checks = dict(_checks(report))
    assert checks == {
        "claim_index": "cyclone_steps_claim_idx",
        "claim_plan": "queue default",
        "claim_cost": "queue default",
    }
    fixes = {a.check: a.fix for a in advise(report)}
    assert fixes["claim_index"] == "REINDEX INDEX CONCURRENTLY app.cyclone_steps_claim_idx"
    assert "VACUUM app.cyclone_steps" in fixes["claim_cost"]
    # a scan of a small queue is the better plan: no warning
    small = _healthy(claims=[ClaimProbe("default", 5.0, False, 1, 3, 0.1)])
    assert advise(small) == []
    assert _checks(_healthy(claim_index=None)) == [("claim_index", "cyclone_steps_claim_idx")]


def test_backlog_reclaims_sequences_and_orphaned_leases() -> None:
    report = _healthy(
        queues=[QueueStats("emails", 12, 0, 0, 900.0), QueueStats("fast", 3, 0, 0, 2.0)],
        reclaimed=[ReclaimedStep("r1", "charge", None, StepState.RUNNING, 5)],
        sequences=[
            HeldSequence("acct-1", 3, 60.0, "r2", "failed"),
            HeldSequence("acct-2", 1, 7200.0, "r3", "running"),
            HeldSequence("acct-3", 1, 60.0, "r4", "running"),
        ],
        orphaned_leases=[OrphanedLeases("host-1-abc", 4, NOW, None)],
    )
    assert _checks(report) == [
        ("backlog", "queue emails"),
        ("reclaims", "run r1"),
        ("sequence", "sequence acct-1"),
        ("sequence", "sequence acct-2"),
        ("orphaned_leases", "client host-1-abc"),
    ]
    by = {a.subject: a for a in advise(report)}
    assert "cyclone-flow worker --queue emails" in by["queue emails"].fix
    assert "cyclone-flow retry r2" in by["sequence acct-1"].fix
    assert "no heartbeat row" in by["client host-1-abc"].message


def test_a_claim_plan_without_the_index_warns_by_the_planners_cost() -> None:
    t = Thresholds()
    # a deep queue on a table still small enough that the planner scans it: no problem
    cheap = ClaimProbe("default", 240.0, False, 10, 30, 0.4)
    report = _healthy(claims=[cheap], queues=[QueueStats("default", 5000, 0, 0, 1.0)])
    assert advise(report) == []
    assert cheap.scan_is_cheaper(t)
    assert cheap.index_text(t) == "no: a scan is cheaper on a table this small (cost 240 < 1000)"
    # few claimable steps, but a table large enough that the scan costs 1,000 or more
    costly = ClaimProbe("default", 1000.0, False, 1, 900, 3.0)
    [advice] = advise(_healthy(claims=[costly], queues=[QueueStats("default", 1, 0, 0, 1.0)]))
    assert (
        advice.check == "claim_plan" and "(cost 1000, over the 1000 below which" in advice.message
    )
    assert costly.index_text(t) == "NO (cost 1000)"
    assert ClaimProbe("default", 9e5, True, 1, 3, 0.1).index_text(t) == "yes"


def test_the_ages_in_the_advice_are_written_by_the_given_format() -> None:
    report = _healthy(queues=[QueueStats("emails", 12, 0, 0, 307.5)])
    [default] = advise(report)
    assert "has waited 5 min 07 s" in default.message  # one style: CLI and dashboard
    [spelled] = advise(report, elapsed=lambda s: f"{s:.0f} seconds")
    assert "has waited 308 seconds" in spelled.message


@pytest.mark.parametrize(("schema", "fix"), [(11, "cyclone-flow migrate"), (13, "upgrade")])
def test_the_schema_version_against_the_code(schema: int, fix: str) -> None:
    [advice] = advise(_healthy(schema_version=schema))
    assert advice.check == "schema_version" and advice.fix.startswith(fix)


def test_connections_in_use_and_the_pool_budget() -> None:
    busy = _healthy(connections=ConnectionBudget(100, 3, 95, 1, 8))
    assert _checks(busy) == [("connections", "max_connections")]
    fleet = _healthy(connections=ConnectionBudget(100, 3, 10, 10, 160))
    assert fleet.pool_budget == 160 + 60
    [advice] = advise(fleet)
    assert advice.subject == "pool budget" and "220 connections" in advice.message


def test_to_json_is_plain_json() -> None:
    import json

    report = _healthy(transactions=[_transaction(1, 600, True)])
    report = dataclasses.replace(report, advice=advise(report))
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["advice"][0]["check"] == "open_transaction"
    assert doc["transactions"][0]["xact_start"] == NOW.isoformat()


def _every_warning() -> HealthReport:
    """A report past every threshold: each check has something to say."""
    return _healthy(
        tables=[
            _table("cyclone_runs", autovacuum_enabled=False),
            _table("cyclone_steps", live=100_000, dead=400_000),
        ],
        transactions=[_transaction(9, 900, True)],
        xmin_holders=[XminHolder("slot", "standby_1", True, 90_000, None)],
        claim_index=IndexSize(bytes=64 << 20, pages=8192, entries=1000),
        claim_index_bloat=500.0,
        claims=[ClaimProbe("default", 9e5, False, 10, 50_000, 80.0)],
        queues=[QueueStats("emails", 12, 0, 0, 900.0)],
        reclaimed=[ReclaimedStep("r1", "charge", None, StepState.RUNNING, 5)],
        sequences=[HeldSequence("acct-1", 3, 60.0, "r2", "failed")],
        orphaned_leases=[OrphanedLeases("host-1-abc", 4, NOW, None)],
        schema_version=11,
        connections=ConnectionBudget(100, 3, 95, 1, 8),
    )


def test_every_check_owns_a_unique_name_that_its_advice_carries() -> None:
    from cyclone_flow.advisor import CHECKS

    names = [c.name for c in CHECKS]
    assert len(names) == len(set(names)) == 13
    report = _every_warning()
    for check in CHECKS:
        given = list(check.advise(report, format_span))
        assert given, f"{check.name} gave no advice on a report past every threshold"
        assert {a.check for a in given} == {check.name}
    # the name is written once, in CHECKS: the check functions yield no name
    import inspect

    for check in CHECKS:
        assert f'"{check.name}"' not in inspect.getsource(check.findings), check.name
        assert all(len(found) == 3 for found in check.findings(report, format_span))
    # advise is the checks one after the other, in the order of CHECKS
    assert [a.check for a in advise(report)] == [
        c.name for c in CHECKS for _ in c.advise(report, format_span)
    ]


def test_the_health_gauges_count_the_warnings_of_every_check_by_its_name() -> None:
    from cyclone_flow.advisor import CHECKS
    from cyclone_flow.metrics import HEALTH_CHECKS, health_families

    assert tuple(c.name for c in CHECKS) == HEALTH_CHECKS
    report = _every_warning()
    report = dataclasses.replace(report, advice=advise(report))
    [warnings] = [f for f in health_families(report) if f.name == "cyclone_health_warnings"]
    counts = {s.labels["check"]: s.value for s in warnings.samples}
    assert counts == {c.name: len(list(c.advise(report, format_span))) for c in CHECKS}


def test_the_observability_page_lists_the_checks_in_the_order_of_checks() -> None:
    from pathlib import Path

    from cyclone_flow.advisor import CHECKS

    page = Path(__file__).parents[2] / "docs" / "observability.md"
    rows = re.findall(r"^\| `(\w+)` \| .* \| .* \|$", page.read_text("utf-8"), re.M)
    documented = [name for name in rows if not name.startswith("cyclone_")]
    assert documented == [c.name for c in CHECKS]

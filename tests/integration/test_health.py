"""The health advisor's library side: ``Client.health`` on a real Postgres, the
``cyclone_health_*`` gauges (read at most once per TTL) and the dashboard's health page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from prometheus_client import generate_latest
from starlette.testclient import TestClient

from cyclone_flow import Client
from cyclone_flow.advisor import Thresholds
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.metrics import HealthCollector, Metrics
from cyclone_flow.ui import create_app

ONE = """
name: one
nodes:
  only:
    call: cyclone_test_handlers.basic:echo
"""


def test_a_fresh_schema_is_healthy_and_its_claim_is_explained(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    client.submit(load_flow_text(ONE), None)
    report = client.health()
    assert report.healthy, report.advice
    [probe] = report.claims
    assert probe.queue == "default" and probe.rows == 1 and probe.buffers >= 1
    assert report.claim_index is not None and report.claim_index.bytes > 0
    assert report.queues[0].available == 1
    assert report.schema_version == report.code_version


def test_a_backlog_older_than_the_threshold_is_advised(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client()
    client.submit_many(load_flow_text(ONE), [None] * 5)
    db.execute("UPDATE cyclone_steps SET scheduled_at = now() - interval '2 minutes'")
    assert client.health().healthy  # the default threshold: 5 minutes
    report = client.health(Thresholds(backlog_age_s=60))
    [backlog] = report.advice
    assert backlog.check == "backlog" and backlog.subject == "queue default"
    assert "5 claimable steps" in backlog.message
    assert "cyclone-flow worker --queue default" in backlog.fix


def test_the_health_gauges_are_read_once_per_ttl(make_client: Callable[..., Client]) -> None:
    client = make_client()
    metrics = Metrics()
    collector = metrics.watch_health(client, ttl_s=3600)
    assert isinstance(collector, HealthCollector)
    first = generate_latest(metrics.registry).decode()
    second = generate_latest(metrics.registry).decode()
    assert collector.reads == 1  # the second scrape served the cached report
    assert 'cyclone_health_dead_tuples{table="cyclone_steps"}' in first
    assert 'cyclone_health_autovacuum_enabled{table="cyclone_runs"} 1.0' in first
    assert 'cyclone_health_warnings{check="open_transaction"} 0.0' in second
    assert "cyclone_health_schema_migrations_behind 0.0" in second


def test_the_dashboard_shows_the_health_page(make_client: Callable[..., Client]) -> None:
    client = make_client()
    page = TestClient(create_app(client), base_url="http://localhost").get("/health")
    assert page.status_code == 200
    assert "healthy: no warnings" in page.text and "cyclone_steps" in page.text


SCAN_ONLY = "-c enable_indexscan=off -c enable_bitmapscan=off"
"""``PGOPTIONS`` of a client whose planner does not walk an index: on the test's tiny
table it scans instead, as a planner does on a small table anyway."""


def test_a_small_table_scanned_instead_of_the_claim_index_is_no_warning(
    make_client: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGOPTIONS", SCAN_ONLY)
    client = make_client()
    client.submit(load_flow_text(ONE), None)
    report = client.health()
    [probe] = report.claims
    assert not probe.uses_claim_index
    assert probe.cost < report.thresholds.plan_min_cost  # the planner: a scan is cheap here
    assert report.healthy, report.advice
    assert probe.index_text(report.thresholds) == (
        f"no: a scan is cheaper on a table this small (cost {probe.cost:.0f} < 1000)"
    )
    # a table large enough that the plan costs more than the threshold: the warning
    strict = client.health(Thresholds(plan_min_cost=probe.cost / 2))
    [advice] = strict.advice
    assert advice.check == "claim_plan" and advice.subject == "queue default"
    assert strict.claims[0].index_text(strict.thresholds) == f"NO (cost {probe.cost:.0f})"

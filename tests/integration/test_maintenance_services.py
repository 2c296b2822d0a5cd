"""Each maintenance service's ``run_once`` with a pinned ``now``, against the real Postgres
and without starting a client (cyclone_flow/maintenance): the service is built
from a database, its config, a recording publish callable and a recording reporter. A
client that is never started submits the runs (it starts no thread); the clock moves only
through ``now``, never by sleeping or by rewriting rows."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from helpers.engine import claim
from helpers.rows import step_row
from psycopg_pool import ConnectionPool

from cyclone_flow import Client, ReclaimLimitExceeded, StepTimeoutError
from cyclone_flow.config import RetentionConfig
from cyclone_flow.db.conn import Conn, Database
from cyclone_flow.events import Reporter, StepEvent
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.inserter import Inserter
from cyclone_flow.maintenance import services
from cyclone_flow.maintenance.base import MaintenanceService
from cyclone_flow.maintenance.deadline_scanner import (
    DeadlineScanner,
    DeadlineScannerConfig,
    DeadlineScannerResult,
)
from cyclone_flow.maintenance.rescuer import Rescuer, RescuerConfig, RescuerResult
from cyclone_flow.maintenance.retention import (
    RetentionSweeper,
    RetentionSweeperConfig,
    RetentionSweeperResult,
)
from cyclone_flow.maintenance.scheduler import (
    ScheduleScanner,
    ScheduleScannerConfig,
    ScheduleScannerResult,
    _Failure,
)
from cyclone_flow.maintenance.sequences import SequenceScanner, SequenceScannerResult
from cyclone_flow.maintenance.wait_scanner import WaitScanner, WaitScannerConfig, WaitScannerResult
from cyclone_flow.notify import Wakeups

TTL_S = 30.0
PARKED = load_flow_text("name: parked\nnodes:\n  s: {call: 'm:f', queue: parked}\n")
TIMED = load_flow_text("name: timed\nnodes:\n  s: {call: 'm:f', queue: parked, timeout: 1h}\n")
WAITS = load_flow_text(
    "name: waits\nnodes:\n"
    "  approve: {type: wait_signal, signal: go, max_wait: 1h}\n"
    "  after: {call: 'm:f', needs: [approve], queue: parked}\n"
)
LATE = load_flow_text(
    "name: late\ndeadline: 1h\nnodes:\n"
    "  a: {call: 'm:f', queue: parked}\n"
    "  b: {call: 'm:f', queue: parked, needs: [a]}\n"
)
NOOP = "cyclone_test_handlers.queueing:noop"


class Recorder:
    """The publish callable and the hooks of a service under test."""

    def __init__(self) -> None:
        self.wakeups = Wakeups()
        self.events: list[StepEvent] = []
        self.errors: list[tuple[StepEvent, BaseException]] = []

    def publish(self, wakeups: Wakeups, conn: Conn | None = None) -> None:
        self.wakeups.merge(wakeups)

    def reporter(self) -> Reporter:
        return Reporter(
            logging.getLogger("cyclone_test"),
            self.events.append,
            lambda event, error: self.errors.append((event, error)),
        )

    def kinds(self) -> list[tuple[str, str]]:
        return [(str(e.kind), e.node) for e in self.events]


@pytest.fixture
def database(database_url: str, schema: str) -> Iterator[Database]:
    """The test's schema on a pool of its own (no client)."""
    with ConnectionPool(database_url, min_size=1, max_size=4, open=True) as pool:
        yield Database(pool, schema)


@pytest.fixture
def producer(make_client: Callable[..., Client]) -> Client:
    """A client that submits and is never started."""
    return make_client()


def _db_now(db: psycopg.Connection[Any]) -> datetime:
    row = db.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def _rescuer(database: Database, rec: Recorder, max_reclaims: int = 0) -> Rescuer:
    return Rescuer(
        database,
        RescuerConfig(max_reclaims=max_reclaims),
        rec.publish,
        logging.getLogger("cyclone_test"),
        rec.reporter(),
    )


def test_the_rescuer_reclaims_a_lease_expired_at_the_pinned_now(
    database: Database, producer: Client, db: psycopg.Connection[Any]
) -> None:
    run_id = producer.submit(PARKED)
    (step,) = claim(producer, "ghost", TTL_S, ["parked"], 1)
    rec = Recorder()
    rescuer = _rescuer(database, rec)
    claimed_at = _db_now(db)
    assert rescuer.run_once(now=claimed_at + timedelta(seconds=TTL_S / 2)) == RescuerResult()
    assert rescuer.run_once() == RescuerResult()  # the database's clock: the lease is fresh
    assert rescuer.run_once(now=claimed_at + timedelta(seconds=TTL_S + 1)) == RescuerResult(
        rescued=1
    )
    row = step_row(db, run_id)
    assert (row["state"], row["reclaims"], row["attempt"], row["lease_owner"]) == (
        "available",
        1,
        1,
        None,
    )
    assert rec.kinds() == [("reclaimed", "s")] and rec.events[0].queue == "parked"
    assert rec.wakeups.queues == {"parked"}
    assert rescuer.run_once(now=claimed_at + timedelta(hours=1)) == RescuerResult()
    assert step.lease_generation == row["lease_generation"]  # a rescue is no new claim


def test_the_rescuer_fails_a_step_past_its_timeout_at_the_pinned_now(
    database: Database, producer: Client, db: psycopg.Connection[Any]
) -> None:
    run_id = producer.submit(TIMED)
    claim(producer, "ghost", 3 * 3600, ["parked"], 1)  # the lease outlives the timeout
    rec = Recorder()
    rescuer = _rescuer(database, rec)
    started = step_row(db, run_id)["started_at"]
    assert rescuer.run_once(now=started + timedelta(minutes=59)) == RescuerResult()
    assert rescuer.run_once(now=started + timedelta(hours=1, seconds=1)) == RescuerResult(
        timed_out=1
    )
    row = step_row(db, run_id)
    assert (row["state"], row["error_kind"], row["reclaims"]) == ("discarded", "timeout", 0)
    assert producer.get_run(run_id).state == "failed"
    assert rec.kinds() == [("discarded", "s")]
    assert [type(e).__name__ for _, e in rec.errors] == [StepTimeoutError.__name__]
    assert rescuer.run_once(now=started + timedelta(hours=2)) == RescuerResult()


def test_the_rescuer_discards_at_the_reclaim_limit(
    database: Database, producer: Client, db: psycopg.Connection[Any]
) -> None:
    run_id = producer.submit(PARKED)
    rec = Recorder()
    rescuer = _rescuer(database, rec, max_reclaims=1)
    claim(producer, "ghost", TTL_S, ["parked"], 1)
    later = _db_now(db) + timedelta(seconds=TTL_S + 1)
    assert rescuer.run_once(now=later) == RescuerResult(rescued=1)
    claim(producer, "ghost", TTL_S, ["parked"], 1)  # reclaimed once: the next expiry is the end
    assert rescuer.run_once(now=later + timedelta(seconds=TTL_S + 5)) == RescuerResult(
        reclaim_limit=1
    )
    row = step_row(db, run_id)
    assert (row["state"], row["error_kind"], row["attempt"], row["reclaims"]) == (
        "discarded",
        "reclaim_limit",
        1,
        1,
    )
    assert producer.get_run(run_id).state == "failed"
    assert rec.kinds() == [("reclaimed", "s"), ("discarded", "s")]
    assert [type(e) for _, e in rec.errors] == [ReclaimLimitExceeded]
    assert rec.wakeups.runs_done == {run_id}


def test_the_wait_scanner_expires_a_wait_at_the_pinned_now(
    database: Database, producer: Client, db: psycopg.Connection[Any]
) -> None:
    run_id = producer.submit(WAITS)
    rec = Recorder()
    scanner = WaitScanner(database, publish=rec.publish, reporter=rec.reporter())
    waiting = step_row(db, run_id, "approve")
    assert waiting["state"] == "waiting"
    assert scanner.run_once() == WaitScannerResult()
    assert scanner.run_once(now=waiting["wait_until"] - timedelta(seconds=1)).expired == 0
    assert scanner.run_once(now=waiting["wait_until"]) == WaitScannerResult(expired=1)
    row = step_row(db, run_id, "approve")
    assert (row["state"], row["error_kind"]) == ("discarded", "timeout")
    assert "signal 'go' did not arrive" in row["error"]
    assert step_row(db, run_id, "after")["state"] == "cancelled"
    assert producer.get_run(run_id).state == "failed"
    assert rec.kinds() == [("discarded", "approve"), ("cancelled", "after")]
    assert [type(e) for _, e in rec.errors] == [StepTimeoutError]
    assert rec.wakeups.runs_done == {run_id}
    assert scanner.run_once(now=waiting["wait_until"] + timedelta(hours=1)).expired == 0


def test_the_deadline_scanner_fails_a_run_at_the_pinned_now(
    database: Database, producer: Client, db: psycopg.Connection[Any]
) -> None:
    run_id = producer.submit(LATE)
    rec = Recorder()
    scanner = DeadlineScanner(
        database, DeadlineScannerConfig(batch_size=10), rec.publish, reporter=rec.reporter()
    )
    deadline_at = db.execute("SELECT deadline_at FROM cyclone_runs WHERE id = %s", (run_id,))
    (at,) = deadline_at.fetchone() or (None,)
    assert at is not None
    assert scanner.run_once() == DeadlineScannerResult()
    assert scanner.run_once(now=at - timedelta(seconds=1)).failed == 0
    assert scanner.run_once(now=at) == DeadlineScannerResult(failed=1)
    status = producer.get_run(run_id)
    assert (status.state, status.error_kind) == ("failed", "deadline")
    assert {s.node: s.state for s in producer.list_steps(run_id)} == {
        "a": "cancelled",
        "b": "cancelled",
    }
    assert sorted(rec.kinds()) == [("cancelled", "a"), ("cancelled", "b")]
    assert rec.wakeups.runs_done == {run_id}
    assert scanner.run_once(now=at + timedelta(days=1)).failed == 0


def test_the_retention_sweep_purges_only_runs_older_than_the_age_at_the_pinned_now(
    database: Database, producer: Client, db: psycopg.Connection[Any]
) -> None:
    done = producer.submit(PARKED)
    running = producer.submit(PARKED)
    assert producer.cancel(done)
    (finished_at,) = db.execute(
        "SELECT finished_at FROM cyclone_runs WHERE id = %s", (done,)
    ).fetchone() or (None,)
    sweeper = RetentionSweeper(database, RetentionSweeperConfig(age_s=3600, batch_size=1))
    assert sweeper.run_once() == RetentionSweeperResult(0, 3600)
    assert sweeper.run_once(now=finished_at + timedelta(minutes=59)).deleted == 0
    result = sweeper.run_once(now=finished_at + timedelta(hours=1, seconds=1))
    assert result == RetentionSweeperResult(1, 3600)
    assert result.summary() == "retention: purged 1 run(s) finished more than 3600s ago"
    ids = {r[0] for r in db.execute("SELECT id::text FROM cyclone_runs").fetchall()}
    assert ids == {running}  # a running run is never purged, however old
    assert db.execute("SELECT count(*) FROM cyclone_steps").fetchone() == (1,)
    assert sweeper.run_once(now=finished_at + timedelta(days=365)).deleted == 0
    off = RetentionSweeper(database, RetentionSweeperConfig(age_s=0))
    assert off.run_once(now=finished_at + timedelta(days=365)).deleted == 0


def test_the_sequence_safety_net_releases_a_stalled_head(
    database: Database, producer: Client, db: psycopg.Connection[Any]
) -> None:
    first = producer.enqueue(NOOP, {}, sequence="n")
    second = producer.enqueue(NOOP, {}, sequence="n")
    # a release that never happened: the first run finished behind the engine's back
    db.execute(
        "UPDATE cyclone_steps SET state = 'cancelled', finished_at = now() WHERE run_id = %s",
        (first,),
    )
    db.execute(
        "UPDATE cyclone_runs SET state = 'cancelled', finished_at = now() WHERE id = %s", (first,)
    )
    rec = Recorder()
    net = SequenceScanner(database, publish=rec.publish)
    assert [s.state for s in producer.list_steps(second)] == ["pending"]
    assert net.run_once(now=_db_now(db)) == SequenceScannerResult(released=1)
    assert [s.state for s in producer.list_steps(second)] == ["available"]
    assert rec.wakeups.queues == {"default"}
    assert net.run_once() == SequenceScannerResult()


def test_the_schedule_scanner_counts_submitted_ticks_and_failing_schedules(
    database: Database, producer: Client, db: psycopg.Connection[Any]
) -> None:
    t0 = datetime.fromisoformat("2024-06-01T12:00:00+00:00")
    producer.add_schedule(PARKED, "*/5 * * * *", name="every-5", now=t0)
    producer.add_schedule(PARKED, "*/5 * * * *", name="broken", now=t0)
    db.execute("UPDATE cyclone_schedules SET cron = '0 0 31 2 *' WHERE name = 'broken'")
    rec = Recorder()
    scanner = ScheduleScanner(database, Inserter(database, producer.config), publish=rec.publish)
    assert scanner.run_once(now=t0) == ScheduleScannerResult()
    result = scanner.run_once(now=t0 + timedelta(minutes=5))
    assert result == ScheduleScannerResult(submitted=1, failed=1)
    assert result.summary() == "schedule scanner: submitted 1 run(s), 1 schedule(s) failed"
    assert rec.wakeups.queues == {"parked"}
    # backing off the failing one: nothing due at once
    assert scanner.run_once(now=t0 + timedelta(minutes=5, seconds=1)) == ScheduleScannerResult()


def test_a_schedule_failing_for_days_does_not_overflow_its_retry_delay(
    database: Database, producer: Client, db: psycopg.Connection[Any]
) -> None:
    """Regression: the delay was ``10 s * 2 ** (failures - 1)`` as a timedelta, which
    overflows (OverflowError out of run_once, ending every pass) after about 45
    consecutive failures; it is capped at ``retry_max_s``."""
    t0 = datetime.fromisoformat("2024-06-01T12:00:00+00:00")
    producer.add_schedule(PARKED, "*/5 * * * *", name="broken", now=t0)
    db.execute("UPDATE cyclone_schedules SET cron = '0 0 31 2 *' WHERE name = 'broken'")
    scanner = ScheduleScanner(database, Inserter(database, producer.config))
    now = t0 + timedelta(minutes=5)
    assert scanner.run_once(now=now).failed == 1
    [(schedule_id, failure)] = scanner._failing.items()
    scanner._failing[schedule_id] = _Failure(failure.version, 200, now)  # failing for days
    assert scanner.run_once(now=now + timedelta(seconds=1)).failed == 1
    assert scanner._failing[schedule_id].count == 201
    assert scanner._failing[schedule_id].retry_at == now + timedelta(seconds=601)


def test_the_services_a_worker_runs_share_one_scaffold_in_the_loops_order(
    database: Database, make_client: Callable[..., Client]
) -> None:
    rec = Recorder()
    log = logging.getLogger("cyclone_test")
    reporter = rec.reporter()
    config = make_client(
        sweep_interval=5.0, max_reclaims=3, retention=RetentionConfig(default_age=3600.0)
    ).config
    built = services(database, config, rec.publish, log, reporter)
    ordered = built.in_order()
    assert [s.name for s in ordered] == [
        "recovery sweep",
        "sequence release",
        "retention sweep",
        "wait scanner",
        "deadline scanner",
        "worker reaper",
        "owner release",
        "rate window pruner",
    ]
    assert [s.interval_s for s in ordered] == [5.0, 5.0, 60.0, 5.0, 5.0, 60.0, 5.0, 60.0]
    for service in ordered:
        assert isinstance(service, MaintenanceService)
        assert service.db is database and service.log is log
    assert built.rescuer.config.max_reclaims == 3
    assert built.rescuer.reporter is reporter and built.wait_scanner.publish == rec.publish
    # without retention nor a scheduler: neither is built; a scheduler given runs second
    scanner = ScheduleScanner(database, Inserter(database, config))
    bare = services(database, make_client().config, rec.publish, log, reporter, scanner)
    assert bare.retention is None
    assert [s.name for s in bare.in_order()][:3] == [
        "recovery sweep",
        scanner.name,
        "sequence release",
    ]
    # a service built without a config has its config's defaults
    assert WaitScanner(database).config == WaitScannerConfig()
    assert WaitScanner(database).interval_s == WaitScannerConfig().interval_s
    # the schedule scanner too, with its extra inserter
    assert isinstance(scanner, MaintenanceService) and scanner.inserter.db is database
    assert scanner.config == ScheduleScannerConfig() and scanner.log.name == "cyclone_flow"

"""Cron schedules: registration from flow files, exactly-once ticks across clients (also
across a DST change, with the clock pinned like River's coalesce(@now, now())), the
misfire policy, pause/resume, and the scanner inside started clients."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from helpers.procs import wait_until

from cyclone_flow import Client, InputValidationError, ScheduleNotFoundError, SubmitOptionError
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.schedules import default_schedule_name

FLOW_TEXT = """
name: nightly
input_schema:
  type: object
  properties: {region: {type: string, default: eu}}
nodes:
  a: {call: "cyclone_test_handlers.queueing:noop"}
schedules:
  - {name: hourly, cron: "30 * * * *", timezone: Europe/Paris, input: {region: fr}}
  - {name: daily, cron: "30 2 * * *", timezone: Europe/Paris}
"""
FLOW = load_flow_text(FLOW_TEXT)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _ticks(db: Any) -> list[tuple[str, datetime]]:
    return [
        (r[0], r[1])
        for r in db.execute(
            "SELECT s.name, r.scheduled_for FROM cyclone_runs r"
            " JOIN cyclone_schedules s ON s.id = r.schedule_id ORDER BY 2, 1"
        ).fetchall()
    ]


def test_ticks_across_a_dst_change_are_submitted_once_by_two_clients(
    make_client: Callable[..., Client], db: Any
) -> None:
    clients = [make_client(), make_client()]
    start = utc(2024, 10, 26, 21, 50)  # Paris 23:50 CEST, the night clocks go back
    result = clients[0].sync_schedules(FLOW, now=start)
    assert (result.added, result.updated, result.removed) == (["hourly", "daily"], [], [])
    steps = [start + timedelta(minutes=5 * i) for i in range(1, 66)]  # to 03:15Z
    barrier = threading.Barrier(2)
    counts = [0, 0]
    errors: list[BaseException] = []

    def scan(i: int) -> None:
        try:
            for now in steps:
                barrier.wait(10)  # both scanners on the same instant at once
                counts[i] += clients[i].schedule_scanner.run_once(now=now).submitted
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=scan, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    expected = [
        ("hourly", utc(2024, 10, 26, 22, 30)),  # 00:30 CEST
        ("hourly", utc(2024, 10, 26, 23, 30)),  # 01:30 CEST
        ("daily", utc(2024, 10, 27, 0, 30)),  # 02:30 CEST: the daily tick, once
        ("hourly", utc(2024, 10, 27, 0, 30)),
        ("hourly", utc(2024, 10, 27, 1, 30)),  # 02:30 CET: the repeated hour is real
        ("hourly", utc(2024, 10, 27, 2, 30)),  # 03:30 CET
    ]
    assert _ticks(db) == expected
    assert sum(counts) == len(expected)
    inputs = {
        r[0]
        for r in db.execute(
            "SELECT input::text FROM cyclone_runs WHERE schedule_id IS NOT NULL"
        ).fetchall()
    }
    assert inputs == {'{"region": "fr"}', '{"region": "eu"}'}  # input_schema defaults filled


def test_after_downtime_only_the_most_recent_missed_tick_runs(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    start = utc(2024, 6, 1, 12, 0)
    flow = load_flow_text(FLOW_TEXT.split("schedules:")[0] + "schedules: [{cron: '*/5 * * * *'}]\n")
    client.sync_schedules(flow, now=start)
    (row,) = client.list_schedules()
    name = default_schedule_name("nightly", "*/5 * * * *", "UTC", None)  # an unnamed entry
    assert (row.name, row.next_run_at) == (name, utc(2024, 6, 1, 12, 5))
    down_until = utc(2024, 6, 1, 15, 7)
    assert client.schedule_scanner.run_once(now=down_until).submitted == 1
    assert client.schedule_scanner.run_once(now=down_until).submitted == 0
    assert _ticks(db) == [(name, utc(2024, 6, 1, 15, 5))]
    (row,) = client.list_schedules()
    assert row.next_run_at == utc(2024, 6, 1, 15, 10) and row.last_run_id is not None


def test_sync_updates_by_name_keeps_ticks_and_removes_dropped_schedules(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    start = utc(2024, 6, 1, 12, 0)
    client.sync_schedules(FLOW, now=start)
    before = {r.name: r.next_run_at for r in client.list_schedules()}
    again = client.sync_schedules(FLOW, now=start + timedelta(hours=5))
    assert (again.added, again.updated, again.removed) == ([], ["hourly", "daily"], [])
    assert {r.name: r.next_run_at for r in client.list_schedules()} == before
    manual = client.add_schedule(FLOW, "0 9 * * 1-5", timezone="America/New_York", now=start)
    assert manual.startswith("nightly-")
    assert client.add_schedule(FLOW, "0 9 * * 1-5", timezone="America/New_York") == manual
    only_daily = load_flow_text(
        FLOW_TEXT.replace(
            '  - {name: hourly, cron: "30 * * * *", timezone: Europe/Paris, input: {region: fr}}\n',
            "",
        )
    )
    dropped = client.sync_schedules(only_daily, now=start)
    assert dropped.removed == ["hourly"]
    assert sorted(r.name for r in client.list_schedules()) == ["daily", manual]
    with pytest.raises(SubmitOptionError, match="created by schedule add"):
        client.sync_schedules(
            load_flow_text(FLOW_TEXT.replace("name: daily", f"name: {manual}")), now=start
        )


def test_bad_schedules_write_nothing(make_client: Callable[..., Client], db: Any) -> None:
    client = make_client()
    with pytest.raises(InputValidationError):
        client.add_schedule(FLOW, "@daily", input={"region": 3})
    with pytest.raises(SubmitOptionError, match="cron="):
        client.add_schedule(FLOW, "every day")
    with pytest.raises(SubmitOptionError, match="no tick found"):  # was a CroniterBadDateError
        client.add_schedule(FLOW, "0 0 31 2 *")
    with pytest.raises(SubmitOptionError, match="timezone="):
        client.add_schedule(FLOW, "@daily", timezone="Europe/Pariss")
    with pytest.raises(SubmitOptionError, match="name="):
        client.add_schedule(FLOW, "@daily", name="no spaces please")
    assert db.execute("SELECT count(*) FROM cyclone_schedules").fetchone() == (0,)


def test_pause_resume_remove(make_client: Callable[..., Client], db: Any) -> None:
    client = make_client()
    start = utc(2024, 6, 1, 12, 0)
    name = client.add_schedule(FLOW, "*/5 * * * *", now=start)
    client.pause_schedule(name)
    assert client.schedule_scanner.run_once(now=start + timedelta(hours=1)).submitted == 0
    client.resume_schedule(name, now=start + timedelta(hours=2, minutes=1))
    (row,) = client.list_schedules()
    assert not row.paused and row.next_run_at == utc(2024, 6, 1, 14, 5)  # missed ticks skipped
    assert client.schedule_scanner.run_once(now=utc(2024, 6, 1, 14, 5)).submitted == 1
    client.remove_schedule(name)
    assert client.list_schedules() == []
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone() == (1,)  # runs stay
    for action in (client.remove_schedule, client.pause_schedule, client.resume_schedule):
        with pytest.raises(ScheduleNotFoundError):
            action(name)


def test_trigger_submits_one_run_now_outside_the_cadence(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    start = utc(2024, 6, 1, 12, 0)
    client.sync_schedules(FLOW, now=start)
    before = {r.name: r.next_run_at for r in client.list_schedules()}
    at = start + timedelta(minutes=1)
    first = client.trigger_schedule("hourly", now=at)
    second = client.trigger_schedule("hourly", now=at)  # the same instant: a second run
    assert first != second
    for run_id in (first, second):
        run = client.get_run(run_id)
        assert (run.flow_name, run.state, run.input) == ("nightly", "running", {"region": "fr"})
        info = client.get_queue_info(run_id) or {}
        assert info["schedule_id"] is not None and info["scheduled_for"] is None  # no tick
    rows = {r.name: r for r in client.list_schedules()}
    assert rows["hourly"].last_run_id == second and rows["hourly"].last_run_at == at
    assert {n: r.next_run_at for n, r in rows.items()} == before  # the cadence goes on
    assert client.schedule_scanner.run_once(now=at).submitted == 0
    # the daily one's input got the flow's defaults when it was synced; a paused one too
    client.pause_schedule("daily")
    daily = client.trigger_schedule("daily")
    assert client.get_run(daily).input == {"region": "eu"}
    assert client.schedule_scanner.run_once(now=utc(2024, 6, 1, 12, 30)).submitted == 1
    assert sorted(name for name, _ in _ticks(db)) == ["daily", "hourly", "hourly", "hourly"]
    for name in ("ghost", "x\udcfe", ""):
        with pytest.raises(ScheduleNotFoundError):
            client.trigger_schedule(name)
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone() == (4,)


def test_started_clients_tick_every_second_exactly_once(
    make_client: Callable[..., Client], db: Any
) -> None:
    clients = [make_client(sweep_interval=0.05, workers=1) for _ in range(2)]
    clients[0].add_schedule(FLOW, "* * * * * *", name="every-second")  # 6th field: seconds
    for client in clients:
        client.start()
    wait_until(
        lambda: db.execute(
            "SELECT count(*) >= 3 FROM cyclone_runs WHERE state = 'completed'"
            " AND schedule_id IS NOT NULL"
        ).fetchone()[0],
        what="three scheduled runs completed",
    )
    for client in clients:
        client.shutdown()
    ticks = [t for _, t in _ticks(db)]
    assert len(ticks) == len(set(ticks)) >= 3
    assert all(t.microsecond == 0 for t in ticks)


DST_FLOW = load_flow_text(
    FLOW_TEXT.split("schedules:")[0]
    + "schedules:\n"
    + "".join(
        f"  - {{name: {name}, cron: '{cron}', timezone: Europe/Berlin}}\n"
        for name, cron in [
            ("daily", "@daily"),
            ("weekly", "@weekly"),
            ("at-0230", "30 2 * * *"),
            ("office", "0 9-17 * * *"),
            ("hourly", "30 * * * *"),
        ]
    )
)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (  # Sunday 28 March 2027, Berlin: 02:00 CET -> 03:00 CEST (a 23-hour day)
            utc(2027, 3, 27, 23),
            utc(2027, 3, 28, 22),
            {"daily": 1, "weekly": 1, "at-0230": 1, "office": 9, "hourly": 23},
        ),
        (  # Sunday 31 October 2027, Berlin: 03:00 CEST -> 02:00 CET (a 25-hour day)
            utc(2027, 10, 30, 22),
            utc(2027, 10, 31, 23),
            {"daily": 1, "weekly": 1, "at-0230": 1, "office": 9, "hourly": 25},
        ),
    ],
)
def test_two_scanners_submit_each_tick_of_berlins_2027_dst_days_once(
    make_client: Callable[..., Client],
    db: Any,
    start: datetime,
    end: datetime,
    expected: dict[str, int],
) -> None:
    """Regression: with croniter 7 no fixed-hour schedule ticked at all (the scanner's
    at_or_before spun ~10 s and raised), 0 of 12 expected runs on each of these days."""
    clients = [make_client(), make_client()]
    clients[0].sync_schedules(DST_FLOW, now=start - timedelta(seconds=1))
    steps = [start + timedelta(minutes=15 * i) for i in range(int((end - start) / MINUTE_15))]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def scan(i: int) -> None:
        try:
            for now in steps:
                barrier.wait(10)
                clients[i].schedule_scanner.run_once(now=now)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=scan, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    ticks = _ticks(db)
    counts = {name: sum(1 for n, _ in ticks if n == name) for name in expected}
    assert counts == expected
    assert len(ticks) == len(set(ticks))
    at_0230 = [t for n, t in ticks if n == "at-0230"]
    # 02:30 does not exist in March: 03:00 CEST; in October only the first (CEST) 02:30
    assert at_0230 == [utc(2027, 3, 28, 1)] if start.month == 3 else [utc(2027, 10, 31, 0, 30)]


MINUTE_15 = timedelta(minutes=15)


def test_a_failing_schedule_is_logged_skipped_and_backed_off_without_starving_others(
    make_client: Callable[..., Client], db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: the first schedule whose tick raised ended the scanner's pass, so the
    schedules after it in the batch were never submitted, and it failed again every sweep."""
    caplog.set_level(logging.ERROR, logger="cyclone_flow")
    client = make_client()
    scanner = client.schedule_scanner
    t0 = utc(2024, 6, 1, 12, 0)
    client.add_schedule(FLOW, "*/5 * * * *", name="broken-dup", now=t0 - timedelta(hours=2))
    assert scanner.run_once(now=t0 - timedelta(hours=2) + timedelta(minutes=5)).submitted == 1
    client.add_schedule(FLOW, "*/5 * * * *", name="broken-cron", now=t0 - timedelta(hours=1))
    client.add_schedule(FLOW, "* * * * *", name="every-minute", now=t0 - timedelta(minutes=1))
    client.add_schedule(FLOW, "0 12 * * *", name="noon", now=t0 - timedelta(minutes=1))
    # by hand in the table: a cron that never fires; a schedule whose due tick already
    # has a run (its insert breaks the unique index on (schedule_id, scheduled_for))
    db.execute("UPDATE cyclone_schedules SET cron = '0 0 31 2 *' WHERE name = 'broken-cron'")
    db.execute(
        "UPDATE cyclone_runs SET scheduled_for = %s WHERE schedule_id ="
        " (SELECT id FROM cyclone_schedules WHERE name = 'broken-dup')",
        (t0,),
    )
    db.execute(
        "UPDATE cyclone_schedules SET next_run_at = %s WHERE name = 'broken-dup'",
        (t0 - timedelta(hours=2),),
    )

    def failures() -> list[str]:
        """``<schedule> <retry delay>`` of each failure logged since the last call."""
        found = [
            re.fullmatch(
                r"schedule (\S+) cannot tick .*next attempt in (\d+s)", r.getMessage(), re.S
            )
            for r in caplog.records
        ]
        caplog.clear()
        return sorted(f"{m[1]} {m[2]}" for m in found if m)

    assert scanner.run_once(now=t0).submitted == 2  # the failing ones first in the batch: skipped
    assert failures() == [
        "broken-cron 10s",
        "broken-dup 10s",
    ]
    assert scanner.run_once(now=t0 + timedelta(seconds=5)).submitted == 0
    assert failures() == []  # backing off: no retry at every sweep
    assert scanner.run_once(now=t0 + timedelta(seconds=10)).submitted == 0
    assert scanner.run_once(now=t0 + timedelta(seconds=30)).submitted == 0
    assert failures() == [
        "broken-cron 20s",
        "broken-cron 40s",
        "broken-dup 20s",
        "broken-dup 40s",
    ]
    scanner.batch = 1  # the two backing off do not take the batch's only place
    assert scanner.run_once(now=t0 + timedelta(minutes=1)).submitted == 1
    db.execute("UPDATE cyclone_schedules SET cron = '*/5 * * * *' WHERE name = 'broken-cron'")
    # fixed: retried at once (its row changed), while broken-dup still waits
    assert scanner.run_once(now=t0 + timedelta(minutes=1, seconds=1)).submitted == 1
    assert failures() == []
    assert _ticks(db) == [
        ("broken-cron", t0),  # its most recent due tick (misfire policy)
        ("broken-dup", t0),  # the run submitted before the table was edited
        ("every-minute", t0),
        ("noon", t0),
        ("every-minute", t0 + timedelta(minutes=1)),
    ]


def test_a_daily_schedule_fires_at_its_minute_in_a_started_client(
    make_client: Callable[..., Client], db: Any
) -> None:
    """Regression: a fixed-hour cron never ticked on the real clock (croniter 7). Two daily
    schedules (UTC, and Asia/Kolkata at +05:30 without DST) for the minute just before the
    database's clock, due already: a started client's maintenance loop submits each tick
    once, the runs complete and next_run_at moves to the same minute tomorrow."""
    now: datetime = db.execute("SELECT now()").fetchone()[0]
    target = now.astimezone(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    client = make_client(sweep_interval=0.05, workers=1)
    for zone in ("UTC", "Asia/Kolkata"):
        local = target.astimezone(ZoneInfo(zone))
        cron = f"{local.minute} {local.hour} * * *"
        client.add_schedule(
            FLOW,
            cron,
            timezone=zone,
            name=zone.replace("/", "."),
            now=target - timedelta(minutes=1),
        )
    assert {r.name: r.next_run_at for r in client.list_schedules()} == {
        "UTC": target,
        "Asia.Kolkata": target,
    }
    client.start()
    wait_until(
        lambda: db.execute(
            "SELECT count(*) = 2 FROM cyclone_runs WHERE state = 'completed'"
            " AND schedule_id IS NOT NULL"
        ).fetchone()[0],
        timeout=20,
        what="both daily runs completed",
    )
    assert _ticks(db) == [("Asia.Kolkata", target), ("UTC", target)]
    assert {r.name: r.next_run_at for r in client.list_schedules()} == {
        "UTC": target + timedelta(days=1),
        "Asia.Kolkata": target + timedelta(days=1),
    }


def test_skipped_ticks_warn_after_a_downtime_not_at_every_sweep_of_a_fast_cron(
    make_client: Callable[..., Client], db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A per-second cron skips the ticks between two sweeps at every pass: debug. Ticks
    skipped over more than three sweep intervals are a downtime: a warning."""
    caplog.set_level(logging.DEBUG, logger="cyclone_flow")
    client = make_client(sweep_interval=10.0)  # a warning past 30 s of skipped ticks
    t0 = utc(2024, 6, 1, 12, 0)
    client.add_schedule(FLOW, "* * * * * *", name="every-second", now=t0)
    scanner = client.schedule_scanner

    def skipped(level: int) -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == level and "skipped" in r.getMessage()
        ]

    for sweep in range(1, 4):  # three sweeps 10 s apart, a worker running
        assert scanner.run_once(now=t0 + timedelta(seconds=10 * sweep)).submitted == 1
    assert skipped(logging.WARNING) == []
    assert skipped(logging.DEBUG) == [
        "schedule every-second: 9 tick(s) closer than the sweep skipped; submitted "
        f"{(t0 + timedelta(seconds=10 * s)).isoformat()}"
        for s in range(1, 4)
    ]
    caplog.clear()
    assert scanner.run_once(now=t0 + timedelta(minutes=10)).submitted == 1  # 9.5 minutes down
    assert skipped(logging.WARNING) == [
        "schedule every-second: 569 missed tick(s) skipped after downtime; submitted the "
        f"most recent one, {(t0 + timedelta(minutes=10)).isoformat()}"
    ]
    assert len(_ticks(db)) == 4

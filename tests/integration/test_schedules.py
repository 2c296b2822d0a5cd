"""Cron schedules: registration from flow files, exactly-once ticks across clients (also
across a DST change, with the clock pinned like River's coalesce(@now, now())), the
misfire policy, pause/resume, and the scanner inside started clients."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers.procs import wait_until

from cyclone_flow import Client, InputValidationError, ScheduleNotFoundError, SubmitOptionError
from cyclone_flow.spec import load_flow_text

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
                counts[i] += clients[i].schedule_scanner.run_once(now=now)
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
    assert (row.name, row.next_run_at) == ("nightly", utc(2024, 6, 1, 12, 5))
    down_until = utc(2024, 6, 1, 15, 7)
    assert client.schedule_scanner.run_once(now=down_until) == 1
    assert client.schedule_scanner.run_once(now=down_until) == 0
    assert _ticks(db) == [("nightly", utc(2024, 6, 1, 15, 5))]
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
    assert client.schedule_scanner.run_once(now=start + timedelta(hours=1)) == 0
    client.resume_schedule(name, now=start + timedelta(hours=2, minutes=1))
    (row,) = client.list_schedules()
    assert not row.paused and row.next_run_at == utc(2024, 6, 1, 14, 5)  # missed ticks skipped
    assert client.schedule_scanner.run_once(now=utc(2024, 6, 1, 14, 5)) == 1
    client.remove_schedule(name)
    assert client.list_schedules() == []
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone() == (1,)  # runs stay
    for action in (client.remove_schedule, client.pause_schedule, client.resume_schedule):
        with pytest.raises(ScheduleNotFoundError):
            action(name)


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

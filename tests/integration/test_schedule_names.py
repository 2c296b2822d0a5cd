"""Schedule names: an unnamed entry of a flow file is named from its
cron, timezone and input, not its position, so adding or reordering entries keeps each
schedule's name, pause state and last tick; schedules an earlier version named by position
(``<flow>``, ``<flow>-<n>``) keep their name, pause state and ticks after the upgrade."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.schedules import default_schedule_name

START = datetime(2030, 1, 1, tzinfo=UTC)
DAILY = "{cron: '0 2 * * *'}"
HOURLY = "{cron: '0 * * * *', timezone: Europe/Paris}"
WEEKLY = "{cron: '@weekly', input: {full: true}}"


def _flow(*entries: str) -> Any:
    body = "".join(f"  - {e}\n" for e in entries)
    return load_flow_text(
        "name: nightly\n"
        "nodes:\n  a: {call: 'cyclone_test_handlers.queueing:noop'}\n"
        f"schedules:\n{body}"
    )


def _state(client: Client) -> dict[str, tuple[str, bool, datetime | None]]:
    return {r.name: (r.cron, r.paused, r.last_run_at) for r in client.list_schedules()}


def test_unnamed_schedules_keep_their_names_when_entries_are_added_or_reordered(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    first = client.sync_schedules(_flow(DAILY, HOURLY), now=START)
    daily = default_schedule_name("nightly", "0 2 * * *", "UTC", None)
    hourly = default_schedule_name("nightly", "0 * * * *", "Europe/Paris", None)
    assert (first.added, first.removed) == ([daily, hourly], [])
    client.pause_schedule(hourly)
    assert client.schedule_scanner.run_once(now=datetime(2030, 1, 1, 3, tzinfo=UTC)).submitted
    before = _state(client)
    assert before[daily][2] is not None  # it fired once

    again = client.sync_schedules(_flow(WEEKLY, HOURLY, DAILY), now=START)
    weekly = default_schedule_name("nightly", "@weekly", "UTC", {"full": True})
    assert (again.added, sorted(again.updated), again.removed) == (
        [weekly],
        sorted([hourly, daily]),
        [],
    )
    after = _state(client)
    assert after[hourly] == before[hourly] and after[hourly][1]  # still paused
    assert after[daily] == before[daily]  # its last tick kept


def test_schedules_named_by_position_before_the_upgrade_keep_name_pause_and_ticks(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    # what an earlier version stored for `schedules: [DAILY, HOURLY]` and, in another
    # flow file, a lone unnamed schedule (named after its flow)
    client.sync_schedules(
        _flow(DAILY.replace("{", "{name: nightly-1, "), HOURLY.replace("{", "{name: nightly-2, ")),
        now=START,
    )
    client.pause_schedule("nightly-2")
    client.schedule_scanner.run_once(now=datetime(2030, 1, 1, 3, tzinfo=UTC))
    before = _state(client)
    assert before["nightly-1"][2] is not None and before["nightly-2"][1]
    ids = dict(db.execute("SELECT name, id FROM cyclone_schedules").fetchall())

    # the upgraded sync of the same file with an entry added first: nothing is renamed
    result = client.sync_schedules(_flow(WEEKLY, HOURLY, DAILY), now=START)
    weekly = default_schedule_name("nightly", "@weekly", "UTC", {"full": True})
    assert (result.added, sorted(result.updated), result.removed) == (
        [weekly],
        ["nightly-1", "nightly-2"],
        [],
    )
    after = _state(client)
    assert after["nightly-1"] == before["nightly-1"]
    assert after["nightly-2"] == before["nightly-2"]  # still paused
    ids_after = dict(db.execute("SELECT name, id FROM cyclone_schedules").fetchall())
    assert ids_after == {**ids, weekly: ids_after[weekly]}  # the same rows, one more

    # a lone schedule named after its flow, then a second entry added
    lone = _flow(DAILY.replace("{", "{name: nightly, "))
    client.sync_schedules(lone, now=START)  # replaces the three above
    client.pause_schedule("nightly")
    result = client.sync_schedules(_flow(HOURLY, DAILY), now=START)
    hourly = default_schedule_name("nightly", "0 * * * *", "Europe/Paris", None)
    assert (result.added, result.updated, result.removed) == ([hourly], ["nightly"], [])
    assert client.get_schedule("nightly").paused  # type: ignore[union-attr]

    # a name the user gave (not positional) is not kept when the entry loses it
    client.sync_schedules(_flow(DAILY.replace("{", "{name: custom, ")), now=START)
    result = client.sync_schedules(_flow(DAILY), now=START)
    daily = default_schedule_name("nightly", "0 2 * * *", "UTC", None)
    assert (result.added, result.removed) == ([daily], ["custom"])

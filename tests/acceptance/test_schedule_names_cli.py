"""Unnamed schedules keep their identity through `schedule sync`: a
paused schedule stays paused and does not run when another schedule is added before it;
`schedule list` shows state and source apart, and no next tick while paused."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from helpers.cli import Runner, json_output, no_traceback

from cyclone_flow import Client

NOOP = "cyclone_test_handlers.queueing:noop"


def _ok(proc: Any) -> Any:
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    return proc


def _cells(table: str) -> list[list[str]]:
    """The cells of each line of a printed table (borders left out)."""
    out = []
    for line in table.splitlines():
        cells = [c.strip() for c in re.split(r"[┃│]", line)]
        if len(cells) > 2:
            out.append(cells[1:-1])
    return out


def _write(path: Path, *schedules: str) -> None:
    body = "".join(f"  - {s}\n" for s in schedules)
    path.write_text(f"name: nightly\nnodes:\n  a: {{call: '{NOOP}'}}\nschedules:\n{body}")


def test_adding_a_schedule_before_a_paused_one_keeps_it_paused(
    cli: Runner, tmp_path: Path, make_client: Callable[..., Client], db: Any
) -> None:
    flow = tmp_path / "nightly.yaml"
    _write(flow, "{cron: '0 2 * * *'}")
    first = _ok(cli("schedule", "sync", flow)).stdout
    match = re.fullmatch(r"nightly: added (\S+)\n", first)
    assert match, first
    nightly = match.group(1)  # nightly-<8 hex> (before: "nightly")
    _ok(cli("schedule", "pause", nightly))

    _write(flow, "{cron: '0 * * * *', timezone: Europe/Paris}", "{cron: '0 2 * * *'}")
    second = _ok(cli("schedule", "sync", flow)).stdout
    match = re.fullmatch(rf"nightly: added (nightly-[0-9a-f]{{8}}); updated {nightly}\n", second)
    assert match, second  # not "added nightly-1, nightly-2; removed nightly"
    hourly = match.group(1)

    listed = {s["name"]: s for s in json_output(_ok(cli("schedule", "list", "--json")).stdout)}
    assert {n: (s["state"], s["source"], s["paused"]) for n, s in listed.items()} == {
        nightly: ("paused", "flow", True),
        hourly: ("active", "flow", False),
    }
    assert listed[nightly]["next_run_at"] is None  # no next tick while paused
    assert listed[hourly]["next_run_at"] is not None

    table = _ok(cli("schedule", "list")).stdout
    header, *rows = _cells(table)
    assert header[4:] == ["state", "source", "next run (UTC)"], table
    by_name = {r[0]: r[4:] for r in rows}
    assert by_name[nightly] == ["paused", "flow", "-"], table
    assert by_name[hourly][:2] == ["active", "flow"], table

    # a scan far in the future submits the active schedule only
    result = make_client().schedule_scanner.run_once(now=datetime(2100, 1, 1, tzinfo=UTC))
    assert result.submitted == 1
    fired = db.execute(
        "SELECT s.name FROM cyclone_runs r JOIN cyclone_schedules s ON s.id = r.schedule_id"
    ).fetchall()
    assert fired == [(hourly,)]

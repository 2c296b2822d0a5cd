"""The maintenance loop (cyclone_flow/maintenance/loop.py) without a database: each due
service's ``run_once`` in turn, a failing service logged by name without stopping the
others, a pass logged only when it did something, each service at its own interval."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime

import pytest

from cyclone_flow.maintenance.loop import MaintenanceLoop


@dataclass(frozen=True)
class Counted:
    n: int

    def summary(self) -> str | None:
        return f"did {self.n}" if self.n else None


class Fake:
    def __init__(self, name: str, interval_s: float, results: list[int] | None = None) -> None:
        self.name = name
        self._interval_s = interval_s
        self.results = results
        self.calls = 0

    @property
    def interval_s(self) -> float:
        return self._interval_s

    def run_once(self, now: datetime | None = None) -> Counted:
        self.calls += 1
        if self.results is None:
            raise RuntimeError("boom")
        return Counted(self.results.pop(0) if self.results else 0)


def test_a_failing_service_is_logged_and_the_others_run(caplog: pytest.LogCaptureFixture) -> None:
    broken = Fake("broken service", 0.0)
    busy = Fake("busy service", 0.0, [2, 0])
    loop = MaintenanceLoop([broken, busy], tick_s=0.0, logger=logging.getLogger("cyclone_test"))
    with caplog.at_level(logging.INFO, logger="cyclone_test"):
        loop.tick()
        loop.tick()
    assert (broken.calls, busy.calls) == (2, 2)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["broken service failed", "did 2", "broken service failed"]
    assert all(r.exc_info for r in caplog.records if "failed" in r.getMessage())


def test_each_service_runs_at_its_own_interval_to_the_nearest_tick() -> None:
    every_tick = Fake("every tick", 10.0, [])
    hourly = Fake("hourly", 3600.0, [])
    loop = MaintenanceLoop([every_tick, hourly], tick_s=10.0, logger=logging.getLogger("t"))
    loop.tick()  # the first tick runs every service
    loop._next_at[0] -= 10.0  # as if one tick had passed
    loop._next_at[1] -= 10.0
    loop.tick()
    assert (every_tick.calls, hourly.calls) == (2, 1)
    loop._next_at[1] -= 3590.0 - 4.0  # 4 s early: within half a tick of its time
    loop._next_at[0] -= 10.0
    loop.tick()
    assert (every_tick.calls, hourly.calls) == (3, 2)


def test_a_set_stop_ends_the_round_and_the_loop() -> None:
    first, second = Fake("first", 0.0, []), Fake("second", 0.0, [])
    loop = MaintenanceLoop([first, second], tick_s=0.01, logger=logging.getLogger("t"))
    stop = threading.Event()
    stop.set()
    loop.tick(stop)
    loop.run(stop)
    assert (first.calls, second.calls) == (0, 0)

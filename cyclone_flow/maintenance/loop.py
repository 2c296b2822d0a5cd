"""The maintenance loop: the one thread of a started client that runs the maintenance
services (Engine Design: Pool Budget lists them).

Every ``tick_s`` seconds (``ClientConfig.sweep_interval``) it runs, in order, the
``run_once()`` of each service whose own ``interval_s`` has passed since its last pass,
to the nearest tick (the first tick runs every service). A service's exception is logged
with its name and never stops the others or the loop (one warning line when the database
is out of reach, counted as ``where="maintenance"``; a traceback at ERROR for anything
else: :meth:`cyclone_flow.events.Reporter.trouble`); a result is logged (at info) only
when something happened (:meth:`Result.summary` is not None).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from cyclone_flow.events import Reporter

__all__ = ["MaintenanceLoop", "Result", "Service"]


class Result(Protocol):
    """What one pass of a service did (counts)."""

    def summary(self) -> str | None:
        """One line for the log when the pass did something, else None."""
        ...


class Service(Protocol):
    """A maintenance service: a ``name`` for the log, its ``interval_s`` and one pass."""

    name: str

    @property
    def interval_s(self) -> float:
        """Seconds between two passes."""
        ...

    def run_once(self, now: datetime | None = None) -> Result:
        """One pass at ``now`` (None: the database's clock)."""
        ...


class MaintenanceLoop:
    """Runs ``services`` in order every ``tick_s`` seconds, each when its interval has
    passed, until ``stop`` is set (see the module docstring); ``reporter`` logs and counts
    their exceptions (default: one on ``logger``)."""

    def __init__(
        self,
        services: Sequence[Service],
        tick_s: float,
        logger: logging.Logger,
        reporter: Reporter | None = None,
    ) -> None:
        self.services = list(services)
        self.tick_s = tick_s
        self.log = logger
        self.reporter = reporter or Reporter(logger)
        self._next_at = [0.0] * len(self.services)  # monotonic; 0: due at the first tick

    def run(self, stop: threading.Event) -> None:
        """The loop: one :meth:`tick` every ``tick_s`` seconds until ``stop`` is set."""
        while not stop.wait(self.tick_s):
            self.tick(stop)

    def tick(self, stop: threading.Event | None = None) -> None:
        """One round: each due service's ``run_once()``, in order; stops early when
        ``stop`` is set."""
        started = time.monotonic()
        for i, service in enumerate(self.services):
            if stop is not None and stop.is_set():
                return
            # due from half a tick before its time on: an interval equal to the tick (the
            # usual case) runs at every tick, whatever the timer's jitter
            if started + self.tick_s / 2 < self._next_at[i]:
                continue
            self._next_at[i] = started + service.interval_s
            try:
                summary = service.run_once().summary()
            except Exception as exc:
                self.reporter.trouble("maintenance", exc, "%s failed", service.name)
                continue
            if summary is not None:
                self.log.info("%s", summary)

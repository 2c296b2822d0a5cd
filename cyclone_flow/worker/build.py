"""Building a client's worker machinery: what ``Client.start()`` needs and a client that
only submits never builds (the output cache, the ``tx_slots`` semaphore, the group
commit's :class:`~cyclone_flow.worker.completion.BatchSink`, the executor and the
:class:`~cyclone_flow.worker.runtime.Worker`), and the schedule scanner, which a started
client's maintenance loop runs and ``Client.trigger_schedule`` borrows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from cyclone_flow.config import ClientConfig
from cyclone_flow.db.conn import Database
from cyclone_flow.handlers import HandlerResolver
from cyclone_flow.inserter import Inserter
from cyclone_flow.maintenance.scheduler import ScheduleScanner, ScheduleScannerConfig
from cyclone_flow.notify import Publish
from cyclone_flow.worker.cache import OutputCache
from cyclone_flow.worker.completion import BatchSink
from cyclone_flow.worker.execute import Executor
from cyclone_flow.worker.runtime import Worker

__all__ = ["WorkerParts", "build_worker", "schedule_scanner", "worker_parts"]


def schedule_scanner(
    db: Database, inserter: Inserter, config: ClientConfig, publish: Publish
) -> ScheduleScanner:
    """The schedule scanner of a client: a pass every ``sweep_interval``, skipped ticks a
    warning past three passes (a downtime's, not the sweep's grain)."""
    return ScheduleScanner(
        db,
        inserter,
        ScheduleScannerConfig(
            interval_s=config.sweep_interval,
            misfire_warning_after_s=3 * config.sweep_interval,
        ),
        publish,
        config.logger,
    )


@dataclass(frozen=True)
class WorkerParts:
    """The parts of a client's worker that outlive one :class:`Worker`: the output cache
    of completed steps, the ``tx_slots`` semaphore bounding completion transactions, and
    the group commit (its thread starts with the worker)."""

    cache: OutputCache
    tx_slots: threading.BoundedSemaphore
    completer: BatchSink


def worker_parts(db: Database, config: ClientConfig) -> WorkerParts:
    """New :class:`WorkerParts` for the client of ``config`` (no thread, no connection)."""
    tx_slots = threading.BoundedSemaphore(config.tx_slots)
    return WorkerParts(
        cache=OutputCache(),
        tx_slots=tx_slots,
        completer=BatchSink(db, config.client_id, tx_slots, config.logger),
    )


def build_worker(
    db: Database,
    config: ClientConfig,
    parts: WorkerParts,
    *,
    resolver: HandlerResolver,
    publish: Publish,
    inserter: Inserter,
    scheduler: ScheduleScanner,
    on_database_error: Callable[[str], None] | None = None,
    only_run: str | None = None,
) -> Worker:
    """The worker machinery of a client, not started: its executor (handlers resolved by
    ``resolver``, completions through ``parts``) and the :class:`Worker` that claims,
    heartbeats and runs the maintenance loop with ``scheduler``. ``only_run``: claim only
    that run's steps (an isolated run's process, which fails a step it cannot import at
    once instead of giving it back)."""
    executor = Executor(
        db,
        config,
        resolver,
        parts.cache,
        parts.tx_slots,
        publish,
        inserter=inserter,
        completer=parts.completer,
        on_database_error=on_database_error,
        give_back=only_run is None,
    )
    return Worker(db, config, executor, publish, only_run=only_run, scheduler=scheduler)

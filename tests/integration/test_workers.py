"""Live workers: every started client keeps a heartbeat row in
``cyclone_workers``, refreshed by its heartbeat and deleted at a clean shutdown;
``Client.workers()`` reads the rows with their liveness at the database's now, and the
worker reaper deletes the rows of dead workers after 10 x their lease TTL. The clock moves
only through a pinned ``now``."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from helpers.engine import database
from helpers.flows import step_flow
from helpers.procs import WorkerProcess, wait_until

from cyclone_flow import Client
from cyclone_flow.maintenance.worker_reaper import WorkerReaper, WorkerReaperConfig


def test_a_started_client_has_a_live_row_until_its_clean_shutdown(
    make_client: Callable[..., Client],
) -> None:
    reader = make_client()
    worker = make_client(worker_queues={"default": 2, "emails": 1}, client_id="w-1")
    assert reader.workers() == []  # a client that never starts has no row
    worker.start()
    (row,) = reader.workers()
    assert row.client_id == "w-1"
    assert (row.hostname, row.pid) == (socket.gethostname(), os.getpid())
    assert dict(zip(row.queues, row.slots, strict=True)) == {"default": 2, "emails": 1}
    assert row.live and row.only_run is None and row.lease_ttl_s == 2.0
    assert row.version and row.serves("emails") and not row.serves("other")
    worker.shutdown(timeout=2.0)
    assert reader.workers() == []


def test_the_heartbeat_refreshes_the_row(make_client: Callable[..., Client]) -> None:
    reader = make_client()
    worker = make_client(lease_ttl=0.3)  # a beat every 0.1 s
    worker.start()
    (first,) = reader.workers()
    later = wait_until(
        lambda: [w for w in reader.workers() if w.heartbeat_at > first.heartbeat_at],
        what="a second beat",
    )
    assert later[0].started_at == first.started_at  # the start is kept


def test_a_worker_is_dead_one_lease_ttl_after_its_last_beat(
    make_client: Callable[..., Client],
) -> None:
    reader = make_client()
    make_client(client_id="w-1").start()  # lease_ttl 2 s
    (row,) = reader.workers()
    at = row.heartbeat_at
    assert reader.workers(now=at + timedelta(seconds=1.9))[0].live
    (dead,) = reader.workers(now=at + timedelta(seconds=2.1))
    assert not dead.live and not dead.serves("default")
    assert 2.0 < dead.last_seen_s < 2.2


def test_the_reaper_deletes_rows_not_heartbeated_for_ten_lease_ttls(
    make_client: Callable[..., Client], database_url: str, schema: str, tmp_path: Path
) -> None:
    reader = make_client()
    proc = WorkerProcess(database_url, schema, tmp_path / "worker.log", lease_ttl="1s")
    (row,) = wait_until(reader.workers, what="the worker's row")
    assert row.pid == proc.pid and row.live
    proc.kill()  # no clean shutdown: the row stays
    (left,) = reader.workers()
    at = left.heartbeat_at
    reaper = WorkerReaper(database(reader), WorkerReaperConfig())
    assert reaper.run_once(now=at + timedelta(seconds=9.9)).deleted == ()
    assert not reader.workers(now=at + timedelta(seconds=9.9))[0].live
    result = reaper.run_once(now=at + timedelta(seconds=10.1))
    assert result.deleted == (row.client_id,)
    assert result.summary() == "worker reaper: deleted the rows of 1 dead worker(s)"
    assert reader.workers() == []


def test_a_run_only_client_says_which_run(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run_id = client.submit(step_flow("cyclone_test_handlers.queueing:noop", queue="parked"))
    client.start(run_id=run_id)
    (row,) = client.workers()
    assert row.only_run == run_id
    assert row.serves("default", run_id) and not row.serves("default", "another")

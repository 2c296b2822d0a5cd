"""Retention: terminal runs older than the age are purged with their steps and deps, in
batches, from many clients at once; running runs never (Client Options:
WithRetentionSweep)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from helpers.engine import database
from helpers.procs import wait_until

from cyclone_flow import Client, ConfigError, RetentionConfig
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.maintenance.retention import RetentionSweeper, RetentionSweeperConfig

FLOW = load_flow_text(
    """
name: retained
nodes:
  a:
    call: cyclone_test_handlers.basic:echo
  b:
    call: cyclone_test_handlers.basic:echo
    needs: [a]
"""
)
FAILING = load_flow_text(
    """
name: retained_failing
nodes:
  a:
    call: cyclone_test_handlers.basic:boom
"""
)
PARKED = load_flow_text("name: parked\nnodes:\n  a: {call: 'm:f', queue: parked}\n")
HOUR = 3600.0


def _finish(client: Client, run_ids: list[str]) -> None:
    for run_id in run_ids:
        assert client.wait(run_id, timeout=20).state.terminal


def _age(db: Any, run_ids: list[str], seconds: float) -> None:
    """Move finished_at (and created_at) of terminal runs ``seconds`` into the past."""
    db.execute(
        "UPDATE cyclone_runs SET finished_at = finished_at - make_interval(secs => %s),"
        " created_at = created_at - make_interval(secs => %s) WHERE id = ANY(%s::uuid[])",
        (seconds, seconds, run_ids),
    )


def _run_ids(db: Any) -> set[str]:
    return {r[0] for r in db.execute("SELECT id::text FROM cyclone_runs").fetchall()}


def _orphans(db: Any) -> tuple[int, int]:
    steps = db.execute(
        "SELECT count(*) FROM cyclone_steps s"
        " WHERE NOT EXISTS (SELECT 1 FROM cyclone_runs r WHERE r.id = s.run_id)"
    ).fetchone()[0]
    deps = db.execute(
        "SELECT count(*) FROM cyclone_deps d"
        " WHERE NOT EXISTS (SELECT 1 FROM cyclone_runs r WHERE r.id = d.run_id)"
    ).fetchone()[0]
    return steps, deps


def test_purge_deletes_only_terminal_runs_older_than_the_age(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client(workers=2, allow_modules=["cyclone_test_handlers"])
    client.start()
    completed_old = client.submit(FLOW, {"x": 1})
    failed_old = client.submit(FAILING, None)
    completed_new = client.submit(FLOW, {"x": 2})
    _finish(client, [completed_old, failed_old, completed_new])
    assert client.get_run(failed_old).state == "failed"
    cancelled_old = client.submit(PARKED)
    assert client.cancel(cancelled_old)
    # a run that started long ago and is still running: never purged, whatever its age
    running_old = client.submit(PARKED)
    db.execute(
        "UPDATE cyclone_runs SET created_at = now() - interval '30 days' WHERE id = %s",
        (running_old,),
    )
    _age(db, [completed_old, failed_old, cancelled_old], 2 * HOUR)
    _age(db, [completed_new], HOUR / 2)

    assert client.count_purgeable(HOUR) == (3, 4)  # 2 + 1 + 1 steps
    assert client.purge(HOUR) == 3
    assert _run_ids(db) == {completed_new, running_old}
    assert _orphans(db) == (0, 0)
    assert client.get_run(running_old).state == "running"
    assert [s.state for s in client.list_steps(running_old)] == ["available"]
    assert client.purge(HOUR) == 0
    # a younger age reaches the newer completed run, never the running one
    assert client.purge(HOUR / 4) == 1
    assert _run_ids(db) == {running_old}


def test_purge_works_in_batches_until_none_is_left(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client(workers=4, allow_modules=["cyclone_test_handlers"])
    client.start()
    run_ids = [client.submit(FLOW, {"i": i}) for i in range(7)]
    _finish(client, run_ids)
    _age(db, run_ids, 2 * HOUR)
    sweeper = RetentionSweeper(
        database(client),
        RetentionSweeperConfig.of(RetentionConfig(default_age=HOUR, batch_size=2)),
        logger=client.config.logger,
    )
    assert sweeper.run_once().deleted == 7
    assert _run_ids(db) == set()
    assert _orphans(db) == (0, 0)


def test_many_clients_purging_at_once_delete_each_run_once(
    make_client: Callable[..., Client], db: Any
) -> None:
    runner = make_client(workers=4, allow_modules=["cyclone_test_handlers"])
    runner.start()
    run_ids = [runner.submit(FLOW, {"i": i}) for i in range(30)]
    _finish(runner, run_ids)
    _age(db, run_ids, 2 * HOUR)
    clients = [make_client() for _ in range(3)]
    barrier = threading.Barrier(len(clients))
    counts: list[int] = []
    errors: list[BaseException] = []

    def purge(client: Client) -> None:
        try:
            barrier.wait(10)
            counts.append(client.purge(HOUR, batch_size=1))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=purge, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert sum(counts) == 30
    assert _run_ids(db) == set()


def test_started_client_purges_in_its_maintenance_loop(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client(workers=2, allow_modules=["cyclone_test_handlers"])
    client.start()
    old = [client.submit(FLOW, {"i": i}) for i in range(3)]
    young = client.submit(FLOW, {"i": 9})
    _finish(client, [*old, young])
    _age(db, old, 2 * HOUR)

    sweeping = make_client(
        workers=1,
        sweep_interval=0.05,
        retention=RetentionConfig(default_age=HOUR, interval=0.05),
    )
    assert sweeping.runtime is None
    sweeping.start()
    assert sweeping.runtime is not None and sweeping.runtime.retention is not None
    wait_until(lambda: _run_ids(db) == {young}, timeout=10, what="the background purge")
    assert _orphans(db) == (0, 0)


@pytest.mark.parametrize("age", [0, -1.0])
def test_non_positive_age_disables_the_sweep(
    make_client: Callable[..., Client], db: Any, age: float
) -> None:
    client = make_client(workers=1, allow_modules=["cyclone_test_handlers"])
    client.start()
    run_id = client.submit(FLOW, None)
    _finish(client, [run_id])
    _age(db, [run_id], 100 * HOUR)
    idle = make_client(retention=RetentionConfig(default_age=age))
    idle.start()
    assert idle.runtime is not None and idle.runtime.retention is None
    sweeper = RetentionSweeper(
        database(idle),
        RetentionSweeperConfig.of(RetentionConfig(default_age=age)),
        logger=idle.config.logger,
    )
    assert sweeper.run_once().deleted == 0
    assert _run_ids(db) == {run_id}


@pytest.mark.parametrize("age", [0, -5, float("nan"), "7d", True])
def test_purge_refuses_a_non_positive_or_bad_age(
    make_client: Callable[..., Client], age: Any
) -> None:
    client = make_client()
    with pytest.raises(ConfigError, match="older_than"):
        client.purge(age)

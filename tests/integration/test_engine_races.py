"""Races the CAS guards must settle (Engine Design: The Claiming Algorithm, CAS State
Transitions, Failure Propagation): concurrent claims, duplicate and stale transitions,
and overlapping fan-in completions."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from cyclone_test_handlers import engine
from helpers.engine import claim, complete_step, database, fail_step, heartbeat, rescue_expired
from helpers.procs import wait_until
from helpers.rows import create_ledger, ledger_rows, step_row

from cyclone_flow.flowfile import load_flow_text

ONE = """
name: one
nodes:
  only:
    call: cyclone_test_handlers.basic:echo
"""

DIAMOND = """
name: diamond
nodes:
  a:
    call: cyclone_test_handlers.engine:ledger
  b:
    call: cyclone_test_handlers.engine:fanin_branch
    needs: [a]
  c:
    call: cyclone_test_handlers.engine:fanin_branch
    needs: [a]
  d:
    call: cyclone_test_handlers.engine:count_exec
    needs: [b, c]
"""


def test_two_clients_race_for_one_step_exactly_one_wins(make_client, db) -> None:
    flow = load_flow_text(ONE)
    c1 = make_client(client_id="racer-1")
    c2 = make_client(client_id="racer-2")
    for _ in range(20):
        run_id = c1.submit(flow, {"v": 1})
        barrier = threading.Barrier(2)
        results: dict[str, list[Any]] = {}

        def race(
            client: Any,
            owner: str,
            barrier: threading.Barrier = barrier,
            results: dict[str, list[Any]] = results,
        ) -> None:
            barrier.wait(timeout=5)
            results[owner] = claim(client, owner, 30.0, ["default"], 1)

        threads = [threading.Thread(target=race, args=(c, c.config.client_id)) for c in (c1, c2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert sorted(len(v) for v in results.values()) == [0, 1], results
        winner = next(owner for owner, steps in results.items() if steps)
        (claimed,) = results[winner]
        assert claimed.run_id == run_id and claimed.lease_generation == 1
        row = step_row(db, run_id, "only")
        assert (row["state"], row["lease_owner"], row["lease_generation"]) == (
            "running",
            winner,
            1,
        )


def test_cas_guard_second_update_changes_zero_rows(make_client, db, database_url) -> None:
    client = make_client(client_id="cas")
    q = database(client).q
    flow = load_flow_text(ONE)

    # The claim CAS: while one transaction holds the claimed row (uncommitted), a second
    # claim skips it; after the commit the row is running and no claim can take it again.
    run_id = client.submit(flow, {"v": 1})
    params = {"queue": "default", "limit": 1, "owner": "tx-1", "ttl_us": 30_000_000}
    params["run_id"] = None
    with psycopg.connect(database_url) as conn1, psycopg.connect(database_url) as conn2:
        assert len(conn1.execute(q["step_claim_if_available"], params).fetchall()) == 1
        assert (
            conn2.execute(q["step_claim_if_available"], {**params, "owner": "tx-2"}).fetchall()
            == []
        )
        conn2.rollback()
        conn1.commit()
        assert (
            conn2.execute(q["step_claim_if_available"], {**params, "owner": "tx-2"}).fetchall()
            == []
        )
        conn2.rollback()
    row = step_row(db, run_id, "only")
    assert (row["lease_owner"], row["lease_generation"]) == ("tx-1", 1)

    # The completion CAS: two transactions complete the same lease; the second blocks on
    # the row lock, re-checks its guard after the first commits, and changes zero rows.
    done = {
        "id": row["id"],
        "owner": "tx-1",
        "generation": 1,
        "output": '{"who": 1}',
    }
    second: dict[str, Any] = {}
    with psycopg.connect(database_url) as conn1, psycopg.connect(database_url) as conn2:
        pid2 = conn2.info.backend_pid
        assert len(conn1.execute(q["step_complete_if_leased"], done).fetchall()) == 1

        def complete_again() -> None:
            cur = conn2.execute(q["step_complete_if_leased"], {**done, "output": '{"who": 2}'})
            second["rows"] = cur.fetchall()
            second["rowcount"] = cur.rowcount
            conn2.commit()

        t = threading.Thread(target=complete_again)
        t.start()
        wait_until(
            lambda: db.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                (pid2,),
            ).fetchone(),
            what="the second completion to block on the row lock",
        )
        conn1.commit()
        t.join(10)
    assert second == {"rows": [], "rowcount": 0}
    row = step_row(db, run_id, "only")
    assert (row["state"], row["output"]) == ("completed", {"who": 1})


def test_stale_lease_generation_changes_zero_rows(make_client, db) -> None:
    """A claim, a reclaim and a second claim: every transition with the first lease's
    generation is stale (complete, fail, heartbeat); the current lease completes."""
    client = make_client(client_id="stale")
    run_id = client.submit(load_flow_text(ONE), {"v": 1})
    (old,) = claim(client, "w-old", 30.0, ["default"], 1)
    db.execute("UPDATE cyclone_steps SET lease_expiry = now() - interval '1 second'")
    assert [r[0] for r in rescue_expired(client, 0, 10)] == [run_id]
    (new,) = claim(client, "w-new", 30.0, ["default"], 1)
    assert (old.id, old.lease_generation, new.lease_generation) == (new.id, 1, 2)

    assert heartbeat(client, "w-old", 30.0, [(old.id, 1)]) == set()
    with database(client).pool.connection() as conn, conn.transaction():
        assert complete_step(client, conn, old, "w-old", '{"stale": true}') is None
    # same owner name, old generation: still stale
    with database(client).pool.connection() as conn, conn.transaction():
        assert complete_step(client, conn, old, "w-new", '{"stale": true}') is None
    with database(client).pool.connection() as conn, conn.transaction():
        assert (
            fail_step(
                client,
                conn,
                step_id=old.id,
                run_id=run_id,
                generation=1,
                owner=None,
                error="late",
                error_kind="handler_error",
            )
            is None
        )
    row = step_row(db, run_id, "only")
    assert (row["state"], row["lease_owner"], row["reclaims"], row["attempt"]) == (
        "running",
        "w-new",
        1,
        1,
    )
    with database(client).pool.connection() as conn, conn.transaction():
        outcome = complete_step(client, conn, new, "w-new", '{"fresh": true}')
    assert outcome is not None and outcome.run_state == "completed"
    assert client.get_run(run_id).output == {"only": {"fresh": True}}


def test_fan_in_join_released_and_run_exactly_once(make_client, db, schema) -> None:
    create_ledger(db)
    flow = load_flow_text(DIAMOND)
    client = make_client(workers=3)
    client.start()
    run_ids = []
    for _ in range(30):
        run_id = client.submit(flow, {"schema": schema})
        status = client.wait(run_id, timeout=15)
        assert status.state == "completed", (status, client.list_steps(run_id))
        run_ids.append(run_id)
    for run_id in run_ids:
        assert engine.executions(run_id, "d") == 1
        rows = ledger_rows(db, run_id)
        assert sorted(r[1] for r in rows) == ["a", "b", "c", "d"], rows
        d = step_row(db, run_id, "d")
        assert (d["lease_generation"], d["attempt"], d["reclaims"]) == (1, 1, 0)
        assert client.get_run(run_id).output == {"d": {"node": "d"}}

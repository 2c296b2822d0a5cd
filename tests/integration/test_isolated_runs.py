"""Isolated runs through the API: ``Client.submit(isolated=True)`` makes the
submitting client the owner of the run, its fan-out items and child runs; the generic
claim skips them while the owner's heartbeat row is live, the owner's run claim takes
them; the owner release hands them to every worker once that row is gone or stale."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from helpers.engine import claim, complete_step, database
from psycopg import sql

from cyclone_flow import Client, load_flow
from cyclone_flow.maintenance.owner_release import OwnerRelease, OwnerReleaseConfig

PARENT = """
name: owned
nodes:
  make: {call: "cyclone_test_handlers.node_types:numbers", input: {n: 2}}
  each:
    type: fan_out
    needs: [make]
    over: "${{ nodes.make.output.items }}"
    call: "cyclone_test_handlers.node_types:square"
  sub:
    type: child
    flow: child.yaml
    needs: [make]
"""
CHILD = 'name: inner\nnodes:\n  one: {call: "cyclone_test_handlers.basic:echo"}\n'


def _owners(database_url: str, schema: str) -> dict[str, Any]:
    """node (of every run) -> claim_owner."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            sql.SQL("SELECT node, claim_owner FROM {}.cyclone_steps").format(sql.Identifier(schema))
        ).fetchall()
    return dict(rows)


def _release(client: Client, now: Any = None) -> Any:
    return OwnerRelease(
        database(client), OwnerReleaseConfig(interval_s=1), lambda *_: None
    ).run_once(now)


def test_owned_steps_go_only_to_their_owner_until_its_row_is_stale(
    make_client: Callable[..., Client], database_url: str, schema: str, tmp_path: Path
) -> None:
    (tmp_path / "child.yaml").write_text(CHILD, encoding="utf-8")
    (tmp_path / "parent.yaml").write_text(PARENT, encoding="utf-8")
    owner = make_client(client_id="run-proc", lease_ttl=5.0, worker_queues={"default": 1})
    other = make_client(client_id="worker")
    run_id = owner.submit(load_flow(tmp_path / "parent.yaml"), isolated=True)
    (row,) = owner.workers()  # written in the submitting transaction
    assert row.client_id == "run-proc" and row.live and row.only_run == str(run_id)
    assert claim(other, "worker", 5, ["default"], 10) == []
    (make,) = claim(owner, "run-proc", 5, ["default"], 10, run_id=str(run_id))
    assert make.node == "make"
    with psycopg.connect(database_url) as conn:
        assert complete_step(owner, conn, make, "run-proc", '{"items": [1, 2]}') is not None
    owners = _owners(database_url, schema)
    # the fan-out items and the child run's step inherit the owner
    assert owners == {"make": "run-proc", "each": "run-proc", "each[0]": "run-proc",
                      "each[1]": "run-proc", "sub": "run-proc", "one": "run-proc"}  # fmt: skip
    assert claim(other, "worker", 5, ["default"], 10) == []
    assert _release(other).steps == 0  # the owner is live
    # one lease_ttl after its last beat the owner is gone: its run goes to every worker
    later = owner.workers()[0].heartbeat_at + timedelta(seconds=6)
    result = _release(other, later)
    assert result.runs == (str(run_id),) and result.steps == 6
    assert set(_owners(database_url, schema).values()) == {None}
    claimed = claim(other, "worker", 5, ["default"], 10)
    assert sorted(s.node for s in claimed) == ["each[0]", "each[1]", "one"]


def test_a_shared_submit_owns_nothing(
    make_client: Callable[..., Client], database_url: str, schema: str, tmp_path: Path
) -> None:
    (tmp_path / "child.yaml").write_text(CHILD, encoding="utf-8")
    (tmp_path / "parent.yaml").write_text(PARENT, encoding="utf-8")
    client = make_client()
    client.submit(load_flow(tmp_path / "parent.yaml"))
    assert client.workers() == []
    assert set(_owners(database_url, schema).values()) == {None}
    assert [s.node for s in claim(client, "w", 5, ["default"], 10)] == ["make"]

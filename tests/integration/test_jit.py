"""No statement of the engine is JIT-compiled on a Postgres with JIT on.

Debian's packaged PostgreSQL ships with ``jit = on``; the embedded server has no JIT. The
limited claim's transaction turns sequential scans and sorts off, which adds the
planner's disable cost (1e10) to any plan that still has one, past every
``jit_*_above_cost``: each limited claim then spent 1.7 s compiling. These tests run the
engine's statements on a cluster of Debian's server (``helpers.debian_pg``) with
``auto_explain`` logging the ``EXPLAIN (ANALYZE, FORMAT JSON)`` of each, and assert that
no plan has a ``"JIT"`` key: the limited claim and its probes, then the other hot
statements (claim, heartbeat, completion and advance, group commit, failure, sweep,
submit), then whatever a started worker sends."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from helpers.debian_pg import DebianCluster, LoggedPlan
from helpers.engine import (
    claim,
    claim_limited,
    complete_step,
    complete_steps,
    database,
    fail_step,
    heartbeat,
    rescue_expired,
)

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.states import ErrorKind

pytestmark = pytest.mark.parametrize("pg_server", ["debian_jit"])

OWNER = "jit-test"

KEYED = """
name: keyed
nodes:
  step:
    call: cyclone_test_handlers.basic:echo
    concurrency: {key: "${{ run.input.k }}", limit: 1}
"""

RATED = """
name: rated
nodes:
  step:
    call: cyclone_test_handlers.basic:echo
    rate_limit: {key: "${{ run.input.k }}", limit: 1, per: 366d}
"""

CHAIN = """
name: chain
nodes:
  a:
    call: cyclone_test_handlers.basic:echo
  b:
    call: cyclone_test_handlers.basic:echo
    needs: [a]
  c:
    call: cyclone_test_handlers.basic:echo
    needs: [b]
"""


@pytest.fixture
def client(debian_jit_cluster: DebianCluster, schema: str) -> Iterator[Client]:
    """A client on the test's schema of the Debian JIT cluster whose sessions log every
    plan (auto_explain), short lease and poll timings."""
    client = Client(
        debian_jit_cluster.explaining_url(),
        schema=schema,
        lease_ttl=2.0,
        poll_interval=(0.02, 0.2),
    )
    yield client
    client.shutdown(timeout=2.0)


def _wire(text: str) -> str:
    """A named statement's text as psycopg sends it (``%(name)s`` -> ``$n``, ``%%`` -> ``%``)."""
    numbers: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        return f"${numbers.setdefault(m.group(1), len(numbers) + 1)}"

    return re.sub(r"%\((\w+)\)s", number, text).replace("%%", "%")


def _names(client: Client) -> dict[str, str]:
    """Statement text as sent -> its name."""
    return {_wire(text): name for name, text in database(client).q.items()}


def _named(client: Client, plans: list[LoggedPlan]) -> dict[str, list[LoggedPlan]]:
    """The plans by the name of their statement (``?`` + its first line for a statement
    the engine does not name: one inside a function, a test's own)."""
    names = _names(client)
    out: dict[str, list[LoggedPlan]] = {}
    for p in plans:
        key = names.get(p.query) or "? " + p.query.strip().splitlines()[0][:80]
        out.setdefault(key, []).append(p)
    return out


def _assert_no_jit(client: Client, plans: list[LoggedPlan], expected: set[str]) -> None:
    named = _named(client, plans)
    missing = expected - set(named)
    assert not missing, f"statements not run (not explained): {sorted(missing)}"
    compiled = {name: [p.plan["JIT"] for p in found if p.jit] for name, found in named.items()}
    compiled = {name: jits for name, jits in compiled.items() if jits}
    assert not compiled, f"JIT-compiled statements: {compiled}"


def test_the_limited_claim_and_its_probes_are_never_jit_compiled(
    client: Client, debian_jit_cluster: DebianCluster
) -> None:
    """The issue's case: 12 steps on 3 concurrency keys at limit 1, claimed one at a time
    (each claim a transaction with seqscans and sorts off), then a claim that takes
    nothing (the probe for more and for the next rate token), on rate keys too. Before
    the fix every one of these plans had a ``"JIT"`` key (1.7 s per claim)."""
    client.submit_many(load_flow_text(KEYED), [{"k": i % 3} for i in range(12)])
    client.submit_many(load_flow_text(RATED), [{"k": i % 2} for i in range(4)])
    with debian_jit_cluster.plans_logged() as plans:
        taken = [claim_limited(client, OWNER, 30, "default", 1) for _ in range(5)]
        empty = claim_limited(client, OWNER, 30, "default", 10)
    assert all(len(t.steps) == 1 for t in taken) and empty.steps == [] and empty.more
    _assert_no_jit(
        client,
        plans,
        {
            "step_begin_limited_claim",
            "step_set_limit_keys_if_available",
            "step_claim_limited_if_available",
            "session_set_index_order",
            "step_exists_limited",
            "step_get_next_rate_token",
        },
    )


def test_the_hot_statements_are_never_jit_compiled(
    client: Client, debian_jit_cluster: DebianCluster
) -> None:
    """The claim, the heartbeat, a completion with its advance, the group commit, a failed
    attempt, the sweep's rescue and the submits, each driven directly on a backlog."""
    chain = load_flow_text(CHAIN)
    with debian_jit_cluster.plans_logged() as plans:
        client.submit(chain, {"i": -1})
        client.submit_many(chain, [{"i": i} for i in range(200)])
        got = claim(client, OWNER, 30, ["default"], 20)
        assert len(got) == 20
        assert heartbeat(client, OWNER, 30, [(s.id, s.lease_generation) for s in got])
        with database(client).pool.connection() as conn:
            assert complete_step(client, conn, got[0], OWNER, "{}") is not None
        with database(client).pool.connection() as conn:
            outcomes = complete_steps(client, conn, OWNER, [(s, "{}") for s in got[1:15]])
            assert all(o is not None for o in outcomes)
        with database(client).pool.connection() as conn:
            failed = got[15]
            assert fail_step(
                client,
                conn,
                step_id=failed.id,
                run_id=failed.run_id,
                generation=failed.lease_generation,
                owner=OWNER,
                error="boom",
                error_kind=ErrorKind.HANDLER_ERROR,
            )
        # leases of the rest that expired: the sweep's rescue
        expired = claim(client, OWNER, 0.001, ["default"], 20)
        assert expired
        assert rescue_expired(client, max_reclaims=5, batch=100)
    _assert_no_jit(
        client,
        plans,
        {
            "run_insert",
            "run_insert_many",
            "step_insert_plan_many",
            "step_claim_if_available",
            "step_extend_lease_if_held_many",
            "step_complete_if_leased",
            "step_complete_if_leased_many",
            "step_release_dependents_if_ready",
            "run_complete_if_done",
            "step_fail_if_leased",
            "step_rescue_if_lease_expired",
        },
    )


def test_a_started_worker_compiles_nothing(
    client: Client, debian_jit_cluster: DebianCluster
) -> None:
    """Whatever a started worker and its maintenance services send while runs of a chain
    and of limited flows complete: no plan JIT-compiled."""
    with debian_jit_cluster.plans_logged() as plans:
        ids = client.submit_many(load_flow_text(CHAIN), [{"i": i} for i in range(30)])
        ids += client.submit_many(load_flow_text(KEYED), [{"k": i % 3} for i in range(9)])
        client.start()
        for run_id in ids:
            assert client.wait(run_id, timeout=60).state == "completed"
    _assert_no_jit(client, plans, {"step_claim_if_available", "step_claim_limited_if_available"})

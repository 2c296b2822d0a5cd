"""Concurrency limits per key and rate limits (docs/flow-control.md): the claim
of limited steps, driven directly (deterministic) and through a started client (fairness
under a hot key, a rate limit over ten seconds of database timestamps)."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.engine import claim, claim_limited, complete_step, database, fail_step, publisher
from helpers.procs import wait_until
from psycopg import pq
from rich.console import Console

from cyclone_flow import Client
from cyclone_flow.cli.watch import render_tree
from cyclone_flow.db import steps as step_rows
from cyclone_flow.db.conn import Session
from cyclone_flow.engine import claim as claiming
from cyclone_flow.explain import WaitReason
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.maintenance.owner_release import OwnerRelease, OwnerReleaseConfig
from cyclone_flow.maintenance.rate_window_pruner import RateWindowPruner, RateWindowPrunerConfig
from cyclone_flow.states import ErrorKind
from cyclone_flow.worker.runtime import Worker

PER_CUSTOMER = """
name: per_customer
nodes:
  charge:
    call: cyclone_test_handlers.basic:echo
    concurrency: {key: "${{ run.input.customer }}", limit: 2}
"""

MIXED = """
name: mixed
nodes:
  free:
    call: cyclone_test_handlers.basic:echo
  limited:
    call: cyclone_test_handlers.basic:echo
    concurrency: {limit: 1}
"""

RATED = """
name: rated
nodes:
  call_api:
    call: cyclone_test_handlers.basic:echo
    rate_limit: {limit: 2, per: 366d}
"""

GLOBAL_40 = """
name: global_40
nodes:
  step:
    call: cyclone_test_handlers.basic:echo
    concurrency: {limit: 40}
"""

SHARED_GROUP = """
name: shared
nodes:
  a:
    call: cyclone_test_handlers.basic:echo
    concurrency: {group: db, limit: 1}
  b:
    call: cyclone_test_handlers.basic:echo
    concurrency: {group: db, limit: 1}
"""

FROM_UPSTREAM = """
name: from_upstream
nodes:
  lookup:
    call: cyclone_test_handlers.basic:echo
  charge:
    call: cyclone_test_handlers.basic:echo
    needs: [lookup]
    concurrency: {key: "${{ nodes.lookup.output.customer }}", limit: 1}
    rate_limit: {key: "${{ run.input.region }}", limit: 100, per: 366d}
"""

OWNER = "test-owner"

# every test also on Debian's PostgreSQL with JIT on (no statement may be JIT-compiled)
pytestmark = pytest.mark.jit_pg


def test_generic_claim_leaves_limited_steps_to_the_limited_claim(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client()
    run_id = client.submit(load_flow_text(MIXED), {})
    got = claim(client, OWNER, 30, ["default"], 10)
    assert [s.node for s in got] == ["free"]
    limited = claim_limited(client, OWNER, 30, "default", 10)
    assert [s.node for s in limited.steps] == ["limited"]
    # a claim that took steps says "more"; the next one, with none left, says none
    assert limited.cursor == "mixed.limited" and limited.more
    after = claim_limited(client, OWNER, 30, "default", 10, limited.cursor)
    assert after.steps == [] and not after.more and after.cursor == "mixed.limited"
    row = db.execute(
        "SELECT concurrency_key, concurrency_limit, claim_owner FROM cyclone_steps"
        " WHERE run_id = %s AND node = 'limited'",
        (run_id,),
    ).fetchone()
    assert row == ("mixed.limited", 1, "~limits")


def test_a_failed_limited_claim_rolls_back_and_releases_the_lock(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client()
    client.submit(load_flow_text(MIXED), {})
    with pytest.raises(psycopg.errors.InvalidRowCountInLimitClause):
        claim_limited(client, OWNER, 30, "default", -1)  # LIMIT -1: the claim fails
    # nothing was claimed, the advisory lock is gone with the rolled-back transaction
    assert db.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone() == (
        0,
    )
    assert [s.node for s in claim_limited(client, OWNER, 30, "default", 10).steps] == ["limited"]


def test_a_limited_claim_commits_without_waiting_for_the_wal_flush(
    make_client: Callable[..., Client], database_url: str, schema: str, tmp_path: Path
) -> None:
    """The limited claims are serialized by the schema's advisory lock, held to their
    COMMIT: an asynchronous commit releases it without the WAL flush (docs/flow-control.md,
    "How the claim keeps the limits"). Seen in the protocol trace of a real claim (a
    connection that sends each statement's text): synchronous_commit off for the
    transaction (set_config's is_local) after BEGIN and before the lock, and the claim
    made."""
    client = make_client()
    client.submit(load_flow_text(MIXED), {})
    trace = tmp_path / "trace"
    with (
        psycopg.connect(database_url, autocommit=True, prepare_threshold=None) as conn,
        trace.open("w") as out,
    ):
        conn.pgconn.trace(out.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        got = claiming.claim_limited(Session(conn, database(client).q), OWNER, 30, "default", 10)
        conn.pgconn.untrace()
    assert [s.node for s in got.steps] == ["limited"]
    # one protocol message per entry (a statement's text may span lines)
    messages = re.split(r"\n(?=[FB]\t)", trace.read_text())
    sent = [m for m in messages if "\tParse\t" in m]
    order = [
        next((i for i, line in enumerate(sent) if what in line), -1)
        for what in (
            '"BEGIN',
            "set_config('synchronous_commit', 'off', true)",
            "pg_advisory_xact_lock",
            '"COMMIT"',
        )
    ]
    assert -1 not in order and order == sorted(order), sent


def _rated(rate_limit: str) -> str:
    """The RATED flow with another ``rate_limit`` mapping (``{limit: N, per: D}``)."""
    return RATED.replace("rate_limit: {limit: 2, per: 366d}", f"rate_limit: {rate_limit}")


def _wait_runs_completed(
    db: psycopg.Connection[Any], runs: int, timeout_s: float, what: str
) -> None:
    """Poll the database until ``runs`` runs are completed (at most ``timeout_s``)."""
    wait_until(
        lambda: (
            db.execute("SELECT count(*) FROM cyclone_runs WHERE state = 'completed'").fetchone()
            == (runs,)
        ),
        timeout_s,
        what=what,
    )


def _generic_plan_in(conn: psycopg.Connection[Any], statement: str) -> str:
    """The generic plan of ``statement`` (placeholders as ``$n``) on ``conn``, in its
    transaction (so under that transaction's settings)."""
    names: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        return f"${names.setdefault(m.group(1), len(names) + 1)}"

    text = re.sub(r"%\((\w+)\)s", number, statement).replace("%%", "%")
    rows = conn.execute("EXPLAIN (GENERIC_PLAN, COSTS OFF) " + text).fetchall()
    return "\n".join(r[0] for r in rows)


def test_the_limited_claim_reads_its_indexes_whatever_the_statistics(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """Statistics that see no available step (taken before a burst of submits; here: of
    the empty table) make every plan over the available steps look free. Seen before the
    fix: the claim's key probes read the queue's whole backlog through
    cyclone_steps_claim_idx and sorted it (a 20,000-step benchmark backlog on a fresh
    schema: 26 ms per claim until autovacuum's ANALYZE), and the claim's UPDATE joined its
    picked rows against a scan of the claim index instead of the primary key. The claim's
    transaction turns sorts and sequential scans off (``step_begin_limited_claim``) and the
    UPDATE's guard names the locked row's state: every read walks an index in order."""
    if db.info.server_version < 160000:  # the Debian JIT run (tests/helpers/debian_pg.py)
        pytest.skip("EXPLAIN (GENERIC_PLAN) needs Postgres 16")
    client = make_client()
    db.execute("ANALYZE cyclone_steps")  # the statistics of an empty table
    client.submit_many(load_flow_text(GLOBAL_40), [{} for _ in range(2000)])
    with database(client).pool.connection() as conn:
        session = Session(conn, database(client).q)
        step_rows.step_begin_limited_claim(session)
        plans = {
            name: _generic_plan_in(conn, database(client).q[name])
            for name in ("step_set_limit_keys_if_available", "step_claim_limited_if_available")
        }
        conn.rollback()
        # the probe for more runs in a transaction of its own, without the lock
        with conn.transaction():
            conn.execute(database(client).q["session_set_index_order"])
            plans["step_exists_limited"] = _generic_plan_in(
                conn, database(client).q["step_exists_limited"]
            )
    for name, plan in plans.items():
        assert "Seq Scan" not in plan, (name, plan)
        assert "Bitmap" not in plan, (name, plan)
    claim_plan = plans["step_claim_limited_if_available"]
    assert "cyclone_steps_claim_idx" not in claim_plan, claim_plan
    assert "using cyclone_steps_limited_idx on cyclone_steps h" in claim_plan, claim_plan
    assert "using cyclone_steps_pkey on cyclone_steps s_1" in claim_plan, claim_plan
    # the table is never sorted: the sorts left are of the claim's own few rows
    sorted_inputs = re.findall(r"Sort\n\s+Sort Key: [^\n]+\n\s+->  (\S+ \S+)", claim_plan)
    assert sorted_inputs and all(n == "CTE Scan" for n in sorted_inputs), claim_plan
    assert "limits_unrendered_idx" in plans["step_set_limit_keys_if_available"]


def test_the_probe_for_limited_steps_never_waits_for_the_limited_claims_lock(
    make_client: Callable[..., Client], database_url: str, schema: str
) -> None:
    """A worker probes each queue it serves for limited steps once per poll interval, in
    its one claim loop: a probe that waited for the limited claims' advisory lock would
    stall the ordinary claim of every queue of that worker while another process holds
    it (a breaker saw a run of a flow without limits never start)."""
    client = make_client()
    client.submit(load_flow_text(MIXED), {})
    with (
        psycopg.connect(database_url) as holder,
        psycopg.connect(database_url, autocommit=True, options="-c lock_timeout=2s") as conn,
    ):
        holder.execute(database(client).q["step_begin_limited_claim"])  # held to its rollback
        assert claiming.has_limited(Session(conn, database(client).q), "default") is True
        assert claiming.has_limited(Session(conn, database(client).q), "other") is False
        holder.rollback()


def test_the_owner_release_leaves_limited_steps_to_the_limited_claim(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client()
    client.submit(load_flow_text(MIXED), {})
    released = OwnerRelease(database(client), OwnerReleaseConfig(interval_s=1.0), publisher(client))
    released.run_once()  # '~limits' is no client: the release must not take it for a dead one
    owners = db.execute("SELECT node, claim_owner FROM cyclone_steps ORDER BY node").fetchall()
    assert owners == [("free", None), ("limited", "~limits")]
    assert [s.node for s in claim(client, OWNER, 30, ["default"], 10)] == ["free"]


def test_a_key_at_its_limit_does_not_block_other_keys(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client()
    flow = load_flow_text(PER_CUSTOMER)
    client.submit_many(flow, [{"customer": "hot"} for _ in range(50)])
    late = client.submit(flow, {"customer": "late"})
    first = claim_limited(client, OWNER, 30, "default", 10)
    keys = sorted(s.limit_key for s in first.steps)
    # the hot key's 2 slots, and the late key behind its 50 steps in submit order
    assert keys == ["per_customer.charge/hot"] * 2 + ["per_customer.charge/late"]
    assert any(s.run_id == late for s in first.steps)
    assert claim_limited(client, OWNER, 30, "default", 10).steps == []  # all keys full
    # a finished step frees its slot in the completing transaction
    with database(client).pool.connection() as conn:
        done = next(s for s in first.steps if s.limit_key.endswith("/hot"))
        assert complete_step(client, conn, done, OWNER, "{}") is not None
    again = claim_limited(client, OWNER, 30, "default", 10)
    assert [s.limit_key for s in again.steps] == ["per_customer.charge/hot"]
    running = db.execute(
        "SELECT count(*) FROM cyclone_steps WHERE state = 'running'"
        " AND concurrency_key = 'per_customer.charge/hot'"
    ).fetchone()
    assert running == (2,)


def test_a_cancel_and_a_failed_attempt_free_their_slots_in_their_transaction(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    flow = load_flow_text(PER_CUSTOMER)
    ids = client.submit_many(flow, [{"customer": "c"} for _ in range(4)])
    first = claim_limited(client, OWNER, 30, "default", 10).steps
    assert [s.run_id for s in first] == ids[:2]
    assert client.cancel(ids[0])  # running -> cancelled: one slot free
    assert [s.run_id for s in claim_limited(client, OWNER, 30, "default", 10).steps] == [ids[2]]
    with database(client).pool.connection() as conn:  # a failed attempt: discarded, slot free
        outcome = fail_step(
            client,
            conn,
            step_id=first[1].id,
            run_id=first[1].run_id,
            generation=first[1].lease_generation,
            owner=OWNER,
            error="boom",
            error_kind=ErrorKind.HANDLER_ERROR,
        )
        assert outcome is not None
    assert [s.run_id for s in claim_limited(client, OWNER, 30, "default", 10).steps] == [ids[3]]


def test_keys_are_claimed_round_robin_from_the_cursor(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    flow = load_flow_text(PER_CUSTOMER.replace("limit: 2", "limit: 1"))
    client.submit_many(flow, [{"customer": c} for c in "abcdabcd"])
    got = claim_limited(client, OWNER, 30, "default", 1, cursor="per_customer.charge/b")
    assert [s.limit_key for s in got.steps] == ["per_customer.charge/c"]
    assert got.cursor == "per_customer.charge/c" and got.more
    got = claim_limited(client, OWNER, 30, "default", 3, cursor=got.cursor)
    # d, then around to a and b (c is at its limit); the next claim starts after b
    assert sorted(s.limit_key for s in got.steps) == [
        "per_customer.charge/a",
        "per_customer.charge/b",
        "per_customer.charge/d",
    ]
    assert got.cursor == "per_customer.charge/b"


def test_a_key_from_an_upstream_output_is_rendered_once_the_step_is_available(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client()
    flow = load_flow_text(FROM_UPSTREAM)
    ids = client.submit_many(flow, [{"region": "eu"}, {"region": "eu"}, {"region": "us"}])
    lookups = claim(client, OWNER, 30, ["default"], 10)
    assert sorted(s.node for s in lookups) == ["lookup"] * 3
    with database(client).pool.connection() as conn:
        for step, customer in zip(lookups, ["c-1", "c-1", "c-2"], strict=True):
            done = complete_step(client, conn, step, OWNER, f'{{"customer": "{customer}"}}')
            assert done is not None
    waiting = db.execute(
        "SELECT count(*) FROM cyclone_steps WHERE node = 'charge' AND state = 'available'"
        " AND concurrency_key IS NULL AND limit_plan IS NOT NULL"
    ).fetchone()
    assert waiting == (3,)  # released, keys not rendered yet
    got = claim_limited(client, OWNER, 30, "default", 10)
    assert sorted(s.limit_key for s in got.steps) == [
        "from_upstream.charge/c-1",
        "from_upstream.charge/c-2",
    ]
    keys = db.execute(
        "SELECT run_id::text, concurrency_key, concurrency_limit, rate_key, rate_limit"
        " FROM cyclone_steps WHERE node = 'charge' ORDER BY id"
    ).fetchall()
    assert keys == [
        (ids[0], "from_upstream.charge/c-1", 1, "from_upstream.charge/eu", 100),
        (ids[1], "from_upstream.charge/c-1", 1, "from_upstream.charge/eu", 100),
        (ids[2], "from_upstream.charge/c-2", 1, "from_upstream.charge/us", 100),
    ]


KINDS = """
name: kinds
nodes:
  lookup:
    call: cyclone_test_handlers.basic:echo
  literal:
    call: cyclone_test_handlers.basic:echo
    concurrency: {key: acme, limit: 1}
  nested:
    call: cyclone_test_handlers.basic:echo
    concurrency: {key: "${{ run.input.customer.id }}", limit: 1}
  missing:
    call: cyclone_test_handlers.basic:echo
    concurrency: {key: "${{ run.input.nope }}", limit: 1}
  number:
    call: cyclone_test_handlers.basic:echo
    concurrency: {key: "${{ run.input.n }}", limit: 1}
  index:
    call: cyclone_test_handlers.basic:echo
    concurrency: {key: "${{ run.input.list.1 }}", limit: 1}
  global:
    call: cyclone_test_handlers.basic:echo
    rate_limit: {group: feed, limit: 5, per: 1s}
  upstream:
    call: cyclone_test_handlers.basic:echo
    needs: [lookup]
    concurrency: {group: up, key: "${{ nodes.lookup.output.customer.id }}", limit: 1}
    rate_limit: {key: "${{ run.input.n }}", limit: 5, per: 1s}
"""


def test_every_kind_of_key_renders_to_its_group_and_value(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """The one key function (cyclone_limit_key) at submit and once an upstream output
    exists: a literal, nested and list paths, a number, a missing value, no key."""
    client = make_client()
    run_id = client.submit(
        load_flow_text(KINDS), {"customer": {"id": "c-7"}, "n": 42, "list": ["a", "b"]}
    )
    (lookup,) = claim(client, OWNER, 30, ["default"], 10)
    with database(client).pool.connection() as conn:
        done = complete_step(client, conn, lookup, OWNER, '{"customer": {"id": "u-9"}}')
        assert done is not None
    claim_limited(client, OWNER, 30, "default", 100)  # renders the upstream node's keys
    keys = db.execute(
        "SELECT node, concurrency_key, rate_key FROM cyclone_steps WHERE run_id = %s"
        " AND node <> 'lookup' ORDER BY node",
        (run_id,),
    ).fetchall()
    assert keys == [
        ("global", None, "feed"),
        ("index", "kinds.index/b", None),
        ("literal", "kinds.literal/acme", None),
        ("missing", "kinds.missing/null", None),
        ("nested", "kinds.nested/c-7", None),
        ("number", "kinds.number/42", None),
        ("upstream", "up/u-9", "kinds.upstream/42"),
    ]


def test_nodes_of_one_group_share_its_slots(make_client: Callable[..., Client]) -> None:
    client = make_client()
    client.submit(load_flow_text(SHARED_GROUP), {})
    got = claim_limited(client, OWNER, 30, "default", 10)
    assert len(got.steps) == 1 and got.steps[0].limit_key == "db"


RATE_PER_REGION = """
name: per_region
nodes:
  job:
    call: cyclone_test_handlers.basic:echo
    concurrency: {limit: 50}
    rate_limit: {key: "${{ run.input.region }}", limit: 2, per: 366d}
"""

GROUP_NAMED_TWICE = """
name: named_twice
nodes:
  a:
    call: cyclone_test_handlers.basic:echo
    rate_limit: {group: stripe, limit: 100, per: 1s}
  b:
    call: cyclone_test_handlers.basic:echo
    concurrency: {group: stripe, limit: 1}
"""


def test_steps_of_one_concurrency_key_with_other_rate_keys_keep_each_rate_limit(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """Steps under one concurrency key whose rate keys differ (a breaker's find: the room
    was counted for the head's rate key and charged to each step's own, 3 claims of a key
    limited to 2): no rate key gets more than its limit, whatever the order."""
    client = make_client()
    regions = ["r2", "r2", "r1"] * 4
    client.submit_many(load_flow_text(RATE_PER_REGION), [{"region": r} for r in regions])
    for _ in range(len(regions)):
        claim_limited(client, OWNER, 30, "default", 10)
    claims = dict(
        db.execute(
            "SELECT rate_key, count(*)::int FROM cyclone_steps WHERE state = 'running'"
            " GROUP BY rate_key"
        ).fetchall()
    )
    assert claims == {"per_region.job/r1": 2, "per_region.job/r2": 2}


def test_a_concurrency_group_named_as_another_node_s_rate_group_keeps_its_limit(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """A rate-limited node and a concurrency-limited node whose groups share a name walk
    under one key (a breaker's find: with the rate-only step at the head the concurrency
    limit was never applied, 4 of a limit of 1 ran): at most 1 runs."""
    client = make_client()
    client.submit_many(load_flow_text(GROUP_NAMED_TWICE), [{} for _ in range(4)])
    for _ in range(8):
        claim_limited(client, OWNER, 30, "default", 10)
    running_b = db.execute(
        "SELECT count(*)::int FROM cyclone_steps WHERE state = 'running' AND node = 'b'"
    ).fetchone()
    running_a = db.execute(
        "SELECT count(*)::int FROM cyclone_steps WHERE state = 'running' AND node = 'a'"
    ).fetchone()
    assert running_b == (1,)
    assert running_a == (4,)


def test_rate_limit_counts_claims_per_window_and_explain_says_when(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client()
    flow = load_flow_text(RATED)
    ids = client.submit_many(flow, [{} for _ in range(5)])
    assert len(claim_limited(client, OWNER, 30, "default", 10).steps) == 2
    assert claim_limited(client, OWNER, 30, "default", 10).steps == []
    assert db.execute("SELECT rate_key, bucket_claims FROM cyclone_rate_windows").fetchall() == [
        ("rated.call_api", [2])
    ]
    client.start()  # a live worker serves the queue: the limit is the reason
    waiting = client.explain(ids[-1])["call_api"]
    assert waiting.reason == "rate_limit"
    assert waiting.text.startswith("rate limit rated.call_api: next token in ")
    assert waiting.as_dict()["key"] == "rated.call_api"


def test_an_empty_limited_claim_says_when_a_rate_key_gets_a_claim_back(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    rated = load_flow_text(_rated("{limit: 2, per: 30s}"))
    client.submit_many(rated, [{} for _ in range(3)])
    first = claim_limited(client, OWNER, 30, "default", 10)
    assert len(first.steps) == 2 and first.retry_in_s is None  # it took steps
    empty = claim_limited(client, OWNER, 30, "default", 10, first.cursor)
    assert empty.steps == [] and empty.more
    # the two claims count until their bucket's end (at most 30 s / 64 away) + 30 s
    assert empty.retry_in_s is not None and 29.0 < empty.retry_in_s <= 30.5, empty


@pytest.mark.parametrize(
    "rate", ["", "rate_limit: {limit: 10, per: 30s}"], ids=["no-rate", "rate-left"]
)
def test_an_empty_limited_claim_waits_for_no_token_when_a_concurrency_limit_holds(
    make_client: Callable[..., Client], rate: str
) -> None:
    """A key held by its concurrency limit is woken by the completion that frees a slot;
    a rate key with tokens left is no reason to claim again at its next token (the worker
    would claim every 1/64 of the window while the slot stays taken)."""
    client = make_client()
    flow = PER_CUSTOMER + (f"    {rate}\n" if rate else "")
    client.submit_many(load_flow_text(flow), [{"customer": "c"} for _ in range(3)])
    assert len(claim_limited(client, OWNER, 30, "default", 10).steps) == 2
    empty = claim_limited(client, OWNER, 30, "default", 10)
    assert empty.steps == [] and empty.more and empty.retry_in_s is None


@pytest.mark.timeout(60)
def test_a_worker_claims_again_when_a_rate_token_comes_back(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """Nothing wakes a worker when a rate key's token comes back: it claimed again only
    at its next poll, backing off (0.05, 0.1, 0.2, ... s) while the key was out of
    tokens, so a saturated key got about two thirds of its limit (a breaker measured 13
    claims per second under a limit of 20). After an empty limited claim the worker
    waits until the first token is back instead: three windows of 5 claims per 2 s start
    about 2 s apart (backing off, the third started about 6.3 s after the first)."""
    client = make_client(workers=8, poll_interval=(0.05, 30.0))
    flow = load_flow_text(_rated("{limit: 5, per: 2s}"))
    client.submit_many(flow, [{} for _ in range(15)])
    client.start()
    _wait_runs_completed(db, 15, 45, "every run completed")
    starts = [
        r[0]
        for r in db.execute(
            "SELECT extract(epoch FROM started_at - min(started_at) OVER ())::float8"
            " FROM cyclone_steps ORDER BY started_at"
        ).fetchall()
    ]
    assert _most_in_any_window(db, "2 seconds") <= 5
    # the third window's first claim: at 2 x (2 s + at most one bucket of 31 ms)
    assert starts[10] < 5.2, starts


def test_explain_names_the_concurrency_key_at_its_limit(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    flow = load_flow_text(PER_CUSTOMER)
    ids = client.submit_many(flow, [{"customer": "c-42"} for _ in range(3)])
    assert len(claim_limited(client, OWNER, 30, "default", 10).steps) == 2
    client.start()  # a live worker, which cannot take the third: the key is full
    waiting = client.explain(ids[2])["charge"]
    assert waiting.reason == "concurrency"
    assert waiting.text.startswith(
        "waiting: concurrency key per_customer.charge/c-42 at limit 2 (2 running)"
    )
    assert waiting.as_dict()["limit"] == 2
    # status --watch's tree says it once (it said "waiting: waiting: concurrency key …")
    tree = render_tree(
        client.get_run(ids[2]),
        client.list_steps(ids[2]),
        client.count_items(ids[2]),
        client.explain(ids[2]),
        datetime.now(UTC),
    )
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(tree)
    shown = console.export_text()
    assert "waiting: concurrency key per_customer.charge/c-42 at limit 2" in shown
    assert "waiting: waiting:" not in shown


def test_one_hot_key_does_not_starve_the_others(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client(workers=8)
    flow = load_flow_text(PER_CUSTOMER)
    client.submit_many(flow, [{"customer": "hot"} for _ in range(1000)])
    client.submit_many(flow, [{"customer": f"k{i % 100}"} for i in range(200)])
    client.start()
    _wait_runs_completed(db, 1200, 120, "every run completed")
    # when the last run of the 100 other keys finished, the hot key was far from done
    # (submitted first, its 1,000 runs would all come first in a FIFO that skipped nothing)
    (hot_done_before,) = db.execute(
        """SELECT count(*) FROM cyclone_steps
           WHERE concurrency_key = 'per_customer.charge/hot'
             AND finished_at <= (SELECT max(finished_at) FROM cyclone_steps
                                 WHERE concurrency_key <> 'per_customer.charge/hot')"""
    ).fetchone() or (0,)
    assert hot_done_before < 700, f"{hot_done_before} of the hot key's 1,000 runs came first"
    # and the others' completions are spread over that time, not bunched at its end
    (early,) = db.execute(
        """SELECT count(*) FROM cyclone_steps
           WHERE concurrency_key <> 'per_customer.charge/hot'
             AND finished_at <= (SELECT min(finished_at) + (max(finished_at) - min(finished_at)) / 2
                                 FROM cyclone_steps)"""
    ).fetchone() or (0,)
    assert early >= 100, f"only {early} of the 200 other runs finished in the first half"


@pytest.mark.timeout(60)
def test_rate_limit_of_50_per_second_holds_over_10_seconds(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client(workers=8)
    flow = load_flow_text(_rated("{limit: 50, per: 1s}"))
    client.submit_many(flow, [{} for _ in range(600)])
    client.start()
    started = time.monotonic()
    wait_until(
        lambda: (
            db.execute(
                "SELECT extract(epoch FROM max(started_at) - min(started_at)) >= 10"
                " FROM cyclone_steps WHERE started_at IS NOT NULL"
            ).fetchone()
            == (True,)
        ),
        40,
        what="ten seconds of claims",
    )
    client.shutdown(timeout=5)
    per_second = db.execute(
        "SELECT date_trunc('second', started_at) AS s, count(*) FROM cyclone_steps"
        " WHERE started_at IS NOT NULL GROUP BY s ORDER BY s"
    ).fetchall()
    counts = [n for _, n in per_second]
    assert max(counts) <= 50, per_second
    assert sum(counts) >= 450, f"{sum(counts)} claims in {time.monotonic() - started:.1f}s"
    assert sum(1 for n in counts if n == 50) >= 5, per_second  # the limit was what bound


def _most_in_any_window(db: psycopg.Connection[Any], per: str) -> int:
    """The most claims (steps' started_at: each claimed once) in any half-open interval
    [t, t + per) that starts at a claim."""
    (most,) = db.execute(
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) OVER (ORDER BY started_at"
        " RANGE BETWEEN CURRENT ROW AND %s::interval - interval '1 microsecond' FOLLOWING)"
        " AS n FROM cyclone_steps WHERE started_at IS NOT NULL) x",
        (per,),
    ).fetchone() or (0,)
    return int(most)


@pytest.mark.timeout(60)
def test_a_backlog_after_an_idle_spell_never_bursts_across_a_window_boundary(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """A key that sat idle, then a backlog: with fixed windows the backlog took ``limit``
    claims at once and ``limit`` more at the next window boundary, less than ``per``
    later (2 x limit in one interval of ``per``); the sliding window never admits more
    than ``limit`` in any interval of length ``per`` (the steps' started_at)."""
    client = make_client(workers=8, poll_interval=(0.01, 0.05))
    flow = load_flow_text(_rated("{limit: 20, per: 1s}"))
    client.submit_many(flow, [{} for _ in range(5)])
    client.start()
    _wait_runs_completed(db, 5, 20, "the first runs")
    # idle for more than one window, by the database clock
    wait_until(
        lambda: (
            db.execute(
                "SELECT now() > max(started_at) + interval '1.2 s' FROM cyclone_steps"
            ).fetchone()
            == (True,)
        ),
        20,
        what="an idle spell",
    )
    client.submit_many(flow, [{} for _ in range(80)])
    _wait_runs_completed(db, 85, 40, "the backlog")
    most = _most_in_any_window(db, "1 s")
    assert most <= 20, f"{most} claims in one second of the backlog"
    assert most == 20  # the limit was what bound
    (span,) = db.execute(
        "SELECT extract(epoch FROM max(started_at) - min(started_at))::float8 FROM cyclone_steps"
        " WHERE started_at > (SELECT min(started_at) + interval '1.2 s' FROM cyclone_steps)"
    ).fetchone() or (0.0,)
    assert span >= 3.0, f"80 claims at 20 per second took {span:.2f} s"


def test_explain_says_when_the_claim_admits_again(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """The next token of "why is it waiting" comes from the claim's own rule: every claim
    that finds no token started before that instant, the first that gets one at or after
    it (and within a bucket of it: the rule counts a claim at its bucket's end)."""
    client = make_client()
    flow = load_flow_text(_rated("{limit: 2, per: 1s}"))
    ids = client.submit_many(flow, [{} for _ in range(3)])
    assert len(claim_limited(client, OWNER, 30, "default", 10).steps) == 2
    # a live worker's row (none started: this test makes every claim itself)
    db.execute(
        "INSERT INTO cyclone_workers (client_id, hostname, pid, queues, slots, lease_ttl,"
        " version) VALUES ('elsewhere', 'host', 1, '{default}', '{1}', interval '1 h', 't')"
    )
    waiting = client.explain(ids[2])["call_api"]
    assert waiting.reason is WaitReason.RATE_LIMIT, waiting.text
    token_at = waiting.claimable_at
    assert token_at is not None
    deadline = time.monotonic() + 10
    while True:
        (before,) = db.execute("SELECT clock_timestamp()").fetchone() or (None,)
        got = claim_limited(client, OWNER, 30, "default", 1).steps
        if got:
            (started,) = db.execute(
                "SELECT started_at FROM cyclone_steps WHERE id = %s", (got[0].id,)
            ).fetchone() or (None,)
            assert started is not None and started >= token_at
            break
        assert before < token_at, "a claim after the instant explain gave found no token"
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_the_pruner_deletes_the_rows_of_rate_keys_idle_for_their_window(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client()
    short = load_flow_text(_rated("{limit: 5, per: 10s}"))
    long = load_flow_text(
        RATED.replace("name: rated", "name: rated_long").replace("per: 366d", "per: 1h")
    )
    client.submit(short, {})
    client.submit(long, {})
    assert len(claim_limited(client, OWNER, 30, "default", 10).steps) == 2
    (last,) = db.execute(
        "SELECT bucket_ends[cardinality(bucket_ends)] FROM cyclone_rate_windows"
        " WHERE rate_key = 'rated.call_api'"
    ).fetchone() or (None,)
    assert last is not None
    pruner = RateWindowPruner(database(client), RateWindowPrunerConfig())
    # the last claim still counts until its bucket's end plus the window: kept
    assert (
        pruner.run_once(now=last + timedelta(seconds=10) - timedelta(microseconds=1)).deleted == ()
    )
    done = pruner.run_once(now=last + timedelta(seconds=10))
    assert done.deleted == ("rated.call_api",)
    assert done.summary() == "rate window pruner: deleted the rows of 1 idle rate key(s)"
    keys = db.execute("SELECT rate_key FROM cyclone_rate_windows").fetchall()
    assert keys == [("rated_long.call_api",)]  # its window of 1h is not over
    assert pruner.run_once().summary() is None


def test_a_failing_limited_claim_does_not_stop_the_queue_s_other_steps(
    make_client: Callable[..., Client], monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """A limited claim that raises (here: a fault injected into the worker's limited claim,
    as the trace-context merge once made every one of them fail) is logged and retried
    after poll_interval max; the queue's unlimited steps are claimed meanwhile."""
    client = make_client(workers=2, poll_interval=(0.02, 0.2))
    flow = load_flow_text(MIXED)
    run_id = client.submit(flow, {"x": 1})

    def broken(self: Any, queue_name: str, free: int) -> Any:
        raise RuntimeError("injected limited-claim failure")

    monkeypatch.setattr(Worker, "_claim_limited", broken)
    client.start()
    wait_until(
        lambda: (
            {s.node: str(s.state) for s in client.list_steps(run_id)}.get("free") == "completed"
        ),
        15,
        what="the unlimited step",
    )
    assert any("limited claim of queue" in r.getMessage() for r in caplog.records)
    states = {s.node: str(s.state) for s in client.list_steps(run_id)}
    assert states["limited"] == "available"  # never claimed while its claim fails

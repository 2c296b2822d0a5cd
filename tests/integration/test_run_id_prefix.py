"""Short run ids: ``Client.resolve_run_id`` takes the start of a run id (at
least 4 hex digits) as the CLI's progress shows it, and names every match of an
ambiguous one."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from helpers.engine import database

from cyclone_flow import AmbiguousRunIdError, Client, RunNotFoundError
from cyclone_flow.flowfile import load_flow_text

FLOW = load_flow_text("name: short\nnodes:\n  a: {call: 'cyclone_test_handlers.basic:echo'}\n")


def clone_run(db: Any, run_id: str, new_id: str) -> None:
    """A copy of run ``run_id``'s row under id ``new_id`` (no steps): runs whose ids
    share a prefix, which random ids almost never do."""
    db.execute(
        "INSERT INTO cyclone_runs SELECT (jsonb_populate_record(NULL::cyclone_runs,"
        " to_jsonb(r) || jsonb_build_object('id', %s::text))).* FROM cyclone_runs r"
        " WHERE r.id = %s",
        (new_id, run_id),
    )


def test_a_unique_prefix_resolves_to_the_full_id(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run_id = str(client.submit(FLOW, {}))
    for given in (run_id, run_id[:8], run_id[:4], run_id[:13], run_id[:8].upper(), run_id[:-1]):
        assert client.resolve_run_id(given) == run_id, given
    assert client.resolve_run_id(uuid.UUID(run_id).hex) == run_id  # no hyphens: a full id


@pytest.mark.parametrize("given", ["", "abc", "a-bcd", "zzzz", "abcd-", "1234 5", "x" * 10_000])
def test_no_prefix_of_a_run_id_is_not_found(make_client: Callable[..., Client], given: str) -> None:
    client = make_client()
    client.submit(FLOW, {})
    with pytest.raises(RunNotFoundError):
        client.resolve_run_id(given)


def test_an_unknown_prefix_is_not_found(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run_id = str(client.submit(FLOW, {}))
    other = "0000" if not run_id.startswith("0000") else "ffff"
    with pytest.raises(RunNotFoundError, match=f"run {other} not found"):
        client.resolve_run_id(other)


def test_an_ambiguous_prefix_lists_the_matches(make_client: Callable[..., Client], db: Any) -> None:
    client = make_client()
    run_id = str(client.submit(FLOW, {}))
    ids = [f"abcd{n:04x}-0000-4000-8000-000000000000" for n in range(1, 13)]
    for new_id in ids[:2]:
        clone_run(db, run_id, new_id)
    with pytest.raises(AmbiguousRunIdError) as two:
        client.resolve_run_id("abcd")
    assert two.value.matches == ids[:2] and not two.value.more
    assert ids[0] in str(two.value) and ids[1] in str(two.value)
    assert client.resolve_run_id(ids[1][:8]) == ids[1]  # a longer prefix tells them apart
    for new_id in ids[2:]:
        clone_run(db, run_id, new_id)
    with pytest.raises(AmbiguousRunIdError) as many:
        client.resolve_run_id("ABCD00")
    assert many.value.matches == ids[:10] and many.value.more
    assert "more than 10" in str(many.value)


def test_the_prefix_lookup_is_a_primary_key_range_scan(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    with database(client).pool.connection() as conn:
        for i in range(300):
            client.submit_tx(conn, FLOW, {"i": i})
    db.execute("ANALYZE cyclone_runs")
    if db.info.server_version < 160000:
        pytest.skip("EXPLAIN (GENERIC_PLAN) needs Postgres 16")
    names: dict[str, int] = {}
    text = re.sub(
        r"%\((\w+)\)s",
        lambda m: f"${names.setdefault(m.group(1), len(names) + 1)}",
        database(client).q["run_list_ids_in_range"],
    )
    plan = "\n".join(r[0] for r in db.execute("EXPLAIN (GENERIC_PLAN, COSTS OFF) " + text))
    assert "cyclone_runs_pkey" in plan and "Seq Scan" not in plan, plan

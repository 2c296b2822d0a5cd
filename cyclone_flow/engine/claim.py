"""Claiming steps and holding their leases (Engine Design: The Claiming Algorithm; Leases
and Heartbeats). Each function is one statement (per queue, for the claim) on the
caller's session: the claim in autocommit (one round trip, no BEGIN/COMMIT: the claim is
as atomic, and the enqueue-to-claim latency shorter), the others committed by it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from cyclone_flow.db import session, steps
from cyclone_flow.db.conn import SessionLike, pipelined
from cyclone_flow.db.rows import ClaimedStep, LimitedClaim
from cyclone_flow.notify import Wakeups

Lease = tuple[int, int]
"""A lease: ``(step id, lease_generation)``."""


def claim(
    s: SessionLike,
    owner: str,
    ttl_s: float,
    queues: Sequence[str],
    limit: int,
    run_id: str | None = None,
    skip_calls: Sequence[str] = (),
) -> list[ClaimedStep]:
    """Claim up to ``limit`` available steps of ``queues`` (of run ``run_id`` and its child
    runs only, when given) for ``owner`` with a lease of ``ttl_s`` seconds, none whose
    ``call`` is in ``skip_calls`` (those this worker gave back lately: it cannot import
    them, docs/failures.md; a statement of its own, not for ``run_id``). One statement per
    queue (``queue = $1`` lets Postgres walk the claim index in order), each queue claimed
    in turn with what the previous left of ``limit`` (the worker's claim loop passes one
    queue at a time)."""
    ttl_us = int(ttl_s * 1_000_000)
    claimed: list[ClaimedStep] = []
    for queue in queues:
        if len(claimed) >= limit:
            break
        left = limit - len(claimed)
        if run_id is not None:  # its process fails what it cannot import: no skip
            claimed += steps.step_claim_in_run_if_available(
                s, queue=queue, limit=left, owner=owner, ttl_us=ttl_us, run_id=run_id
            )
        elif skip_calls:
            claimed += steps.step_claim_other_calls_if_available(
                s, queue=queue, limit=left, owner=owner, ttl_us=ttl_us, skip_calls=skip_calls
            )
        else:
            claimed += steps.step_claim_if_available(
                s, queue=queue, limit=left, owner=owner, ttl_us=ttl_us
            )
    return claimed


@dataclass(frozen=True)
class LimitedClaims:
    """What :func:`claim_limited` claimed: ``steps``; ``cursor``, the key to start the
    next limited claim of the queue after (the last key claimed from, or the cursor
    given); ``more``: the queue may still have available limited steps (claimable now
    or later), so the worker keeps claiming them: True when the claim took steps (the
    next claim finds out whether any are left), else what :func:`probe_limited` found;
    ``retry_in_s``: after a claim that took nothing, the seconds until a rate key of one
    of the queue's keys gets a claim back (None: none waits on a rate key), when the
    worker should claim again."""

    steps: list[LimitedClaim]
    cursor: str
    more: bool
    retry_in_s: float | None = None


@dataclass(frozen=True)
class LimitedProbe:
    """What :func:`probe_limited` found: ``more``, the queue has available limited steps
    (claimable now or later); ``retry_in_s``, the seconds until a rate key of one of its
    keys' heads gets a claim back (None: no head waits on a rate key's log)."""

    more: bool
    retry_in_s: float | None


def has_limited(s: SessionLike, queue: str) -> bool:
    """Whether ``queue`` has available limited steps (claimable now or later), on an
    autocommit session: one index probe, in a transaction sent whole in one round trip
    (BEGIN, reads in index order without JIT, the probe, COMMIT), so that it reads an
    index whatever the statistics say; it takes no lock, so it never waits for a limited
    claim. The worker runs it at most once per poll interval while the queue has none.
    Raises what the database raised (the transaction is rolled back)."""
    return _probe(s, queue, rate=False).more


def probe_limited(s: SessionLike, queue: str) -> LimitedProbe:
    """:func:`has_limited`, and when the queue has limited steps, the seconds until a
    rate key of one of its keys' heads gets a claim back (``step_get_next_rate_token``,
    in the same round trip): what a limited claim that took nothing asks. Raises what the
    database raised."""
    return _probe(s, queue, rate=True)


def _probe(s: SessionLike, queue: str, *, rate: bool) -> LimitedProbe:
    with _one_round_trip(s):
        session.send_session_set_index_order(s)
        found = steps.send_step_exists_limited(s, queue=queue)
        token = steps.send_step_get_next_rate_token(s, queue=queue) if rate else None
    more = found.result()
    return LimitedProbe(more, token.result() if token is not None and more else None)


def claim_limited(
    s: SessionLike,
    owner: str,
    ttl_s: float,
    queue: str,
    limit: int,
    cursor: str = "",
    run_id: str | None = None,
) -> LimitedClaims:
    """Claim up to ``limit`` limited steps of ``queue`` (nodes with ``concurrency:`` or
    ``rate_limit:``, docs/flow-control.md) within their keys' limits, on an autocommit
    session (as :func:`claim`), in one transaction sent whole in one round trip: BEGIN,
    the transaction's settings and this schema's limited-claim lock in one statement
    (``step_begin_limited_claim``: generic plans, an asynchronous commit, reads in index
    order, no JIT; the lock held to the COMMIT, so the claim's snapshot counts every
    limited claim committed before it), the rendering of keys that refer to an upstream
    output, the claim, COMMIT. When it claimed nothing, :func:`probe_limited` tells
    whether the queue still has limited steps and when a rate key gets a claim back (one
    more round trip, only then). Keys are walked round robin from the first after
    ``cursor``; ``run_id``: only that run and its child runs. Raises what the database
    raised (the transaction is then rolled back)."""
    with _one_round_trip(s):
        steps.send_step_begin_limited_claim(s)
        steps.send_step_set_limit_keys_if_available(s, queue=queue)
        claimed = steps.send_step_claim_limited_if_available(
            s,
            queue=queue,
            limit=limit,
            owner=owner,
            ttl_us=int(ttl_s * 1_000_000),
            cursor=cursor,
            run_id=run_id,
        )
    rows = claimed.result()
    if rows:  # the queue may have more: the next claim finds out
        return LimitedClaims(rows, _last_key(cursor, {r.limit_key for r in rows}), True)
    probe = probe_limited(s, queue)
    return LimitedClaims(rows, cursor, probe.more, probe.retry_in_s)


@contextmanager
def _one_round_trip(s: SessionLike) -> Iterator[None]:
    """A transaction sent whole in one round trip on the autocommit session ``s``: BEGIN,
    the statements the block sends (read their results after it), COMMIT, in one
    pipeline. On any error the transaction is rolled back (a failed statement left it
    open) and the error raised."""
    try:
        with pipelined(s.conn):
            session.send_session_begin(s)
            yield
            session.send_session_commit(s)
    except BaseException:
        with suppress(Exception):
            s.conn.rollback()
        raise


def _last_key(cursor: str, keys: set[str]) -> str:
    """The last of ``keys`` in the walk's order: the keys after ``cursor``, then (wrapped
    around) those up to it; byte order, as the claim's ``COLLATE "C"``."""
    wrapped = [k for k in keys if k.encode() <= cursor.encode()]
    if wrapped:
        return max(wrapped, key=str.encode)
    return max(keys, key=str.encode) if keys else cursor


def extend_leases(s: SessionLike, owner: str, ttl_s: float, leases: Sequence[Lease]) -> set[Lease]:
    """Renew every lease in ``leases`` by ``ttl_s`` seconds in one statement (the
    heartbeat); return the leases renewed. A lease not renewed is lost (cancelled, timed
    out, or reclaimed): its handler should stop."""
    if not leases:
        return set()
    ordered = sorted(leases)  # in id order, as a group commit sends its rows
    return steps.step_extend_lease_if_held_many(
        s,
        ids=[lease[0] for lease in ordered],
        generations=[lease[1] for lease in ordered],
        owner=owner,
        ttl_us=int(ttl_s * 1_000_000),
    )


def release_leases(s: SessionLike, owner: str, leases: Sequence[Lease]) -> Wakeups:
    """Give back unfinished steps at shutdown so another worker claims them at once (no
    attempt and no reclaim charged); the wakeups of their queues."""
    wakeups = Wakeups()
    if leases:
        wakeups.queues.update(
            steps.step_release_lease_if_held_many(
                s,
                ids=[lease[0] for lease in leases],
                generations=[lease[1] for lease in leases],
                owner=owner,
            )
        )
    return wakeups

"""Claiming steps and holding their leases (Engine Design: The Claiming Algorithm; Leases
and Heartbeats). Each function is one statement (per queue, for the claim) on the
caller's session: the claim in autocommit (one round trip, no BEGIN/COMMIT: the claim is
as atomic, and the enqueue-to-claim latency shorter), the others committed by it.
"""

from __future__ import annotations

from collections.abc import Sequence

from cyclone_flow.db import steps
from cyclone_flow.db.conn import SessionLike
from cyclone_flow.db.rows import ClaimedStep
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
) -> list[ClaimedStep]:
    """Claim up to ``limit`` available steps of ``queues`` (of run ``run_id`` and its child
    runs only, when given) for ``owner`` with a lease of ``ttl_s`` seconds. One statement
    per queue (``queue = $1`` lets Postgres walk the claim index in order), each queue
    claimed in turn with what the previous left of ``limit`` (the worker's claim loop
    passes one queue at a time)."""
    ttl_us = int(ttl_s * 1_000_000)
    claimed: list[ClaimedStep] = []
    for queue in queues:
        if len(claimed) >= limit:
            break
        left = limit - len(claimed)
        if run_id is None:
            claimed += steps.step_claim_if_available(
                s, queue=queue, limit=left, owner=owner, ttl_us=ttl_us
            )
        else:
            claimed += steps.step_claim_in_run_if_available(
                s, queue=queue, limit=left, owner=owner, ttl_us=ttl_us, run_id=run_id
            )
    return claimed


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

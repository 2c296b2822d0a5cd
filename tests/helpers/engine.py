"""Driving the engine's transitions directly, for deterministic race and pipeline tests:
the claim, heartbeat, completion and failure of a step, the recovery sweep's rescue and
the maintenance services (recovery sweep, wait and deadline scanners, sequence safety
net), each through the functions and services a client itself calls
(:mod:`cyclone_flow.engine`, :mod:`cyclone_flow.db`, :mod:`cyclone_flow.maintenance`) on
``client``'s database.

The functions that take a ``conn`` run in the caller's transaction on it (as a worker's
completion does) and never commit; the others take a pool connection of ``client``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from cyclone_flow import Client
from cyclone_flow.db import steps
from cyclone_flow.db.conn import Database
from cyclone_flow.db.rows import ClaimedStep
from cyclone_flow.engine import claim as claiming
from cyclone_flow.engine import complete, fail
from cyclone_flow.engine.tx import Outcome, Tx
from cyclone_flow.events import Reporter
from cyclone_flow.maintenance.deadline_scanner import DeadlineScanner
from cyclone_flow.maintenance.sequences import SequenceScanner
from cyclone_flow.maintenance.wait_scanner import WaitScanner
from cyclone_flow.notify import Wakeups
from cyclone_flow.states import StepState
from cyclone_flow.worker.build import WorkerParts

Conn = psycopg.Connection[Any]


def database(client: Client) -> Database:
    """The :class:`~cyclone_flow.db.conn.Database` ``client`` runs its statements with
    (its pool and the statements rendered for its schema).

    The public API hides it on purpose; tests need it to drive one transition or one
    maintenance pass directly (a claim, a sweep, a service's ``run_once``) on the very
    pool and schema the client uses, and to read the rendered statements
    (``database(client).q[name]``) or use its pool (``database(client).pool``). This is
    the one place tests reach into the client for it."""
    return client._db


def publisher(client: Client) -> Callable[..., None]:
    """``client``'s post-commit publish (``publish(wakeups, conn=None)``), for a service
    or a transition a test drives by hand: the wakeups it collects go out as the
    client's own would (the public API publishes only after its own commits)."""
    return client._publish


def worker_parts(client: Client) -> WorkerParts:
    """The worker-side parts ``client`` builds at ``start()`` (its output cache, the
    group commit's sink, the transaction slots), built now if not yet, so a test can
    reach the very completer or cache the worker uses."""
    return client._worker_parts()


def claim(
    client: Client,
    owner: str,
    ttl_s: float,
    queues: Sequence[str],
    limit: int,
    run_id: str | None = None,
) -> list[ClaimedStep]:
    """Claim up to ``limit`` steps of ``queues`` for ``owner`` (a lease of ``ttl_s``
    seconds), in autocommit, as the worker's claim loop does."""
    with database(client).autocommit_session() as s:
        return claiming.claim(s, owner, ttl_s, queues, limit, run_id)


def claim_limited(
    client: Client,
    owner: str,
    ttl_s: float,
    queue: str,
    limit: int,
    cursor: str = "",
    run_id: str | None = None,
) -> claiming.LimitedClaims:
    """The limited claim (steps with ``concurrency:`` / ``rate_limit:``) of up to
    ``limit`` steps of ``queue`` for ``owner``, a transaction in one round trip on an
    autocommit session, as the worker's claim loop runs it."""
    with database(client).autocommit_session() as s:
        return claiming.claim_limited(s, owner, ttl_s, queue, limit, cursor, run_id)


def heartbeat(
    client: Client, owner: str, ttl_s: float, leases: Sequence[tuple[int, int]]
) -> set[tuple[int, int]]:
    """Renew ``leases`` (``(step id, generation)``) of ``owner``; the leases renewed."""
    with database(client).session() as s:
        return claiming.extend_leases(s, owner, ttl_s, leases)


def complete_step(
    client: Client, conn: Conn, step: ClaimedStep, owner: str, output_json: str
) -> Outcome | None:
    """Complete ``step`` in the caller's transaction on ``conn``; None when stale."""
    return complete.complete_step(Tx(conn, database(client).q), step, owner, output_json)


def complete_steps(
    client: Client, conn: Conn, owner: str, batch: Sequence[tuple[ClaimedStep, str]]
) -> list[Outcome | None]:
    """The group commit of ``batch`` in the caller's transaction on ``conn``."""
    return complete.complete_steps(Tx(conn, database(client).q), owner, batch)


def fail_step(client: Client, conn: Conn, **attempt: Any) -> Outcome | None:
    """A failed attempt (the fields of :class:`cyclone_flow.db.steps.FailParams` as
    keywords) in the caller's transaction on ``conn``; None when stale."""
    return fail.fail_step(Tx(conn, database(client).q), steps.FailParams(**attempt))


def rescue_expired(
    client: Client, max_reclaims: int, batch: int
) -> list[tuple[str, str, str, int]]:
    """The sweep's rescue of expired leases: ``(run_id, node, queue, reclaims)`` per
    step put back."""
    with database(client).session() as s:
        rescued = steps.step_rescue_if_lease_expired(s, max_reclaims=max_reclaims, batch=batch)
    return [(r.run_id, r.node, r.queue, r.reclaims) for r in rescued]


def release_stalled_sequences(client: Client) -> tuple[int, Wakeups]:
    """One pass of the sequence safety net of ``client`` (its ``SequenceScanner``); the
    sequences released and the wakeups it published."""
    published = Wakeups()

    def publish(wakeups: Wakeups, conn: Conn | None = None) -> None:
        published.merge(wakeups)
        publisher(client)(wakeups, conn)

    released = SequenceScanner(database(client), publish=publish).run_once().released
    return released, published


def sweep_once(client: Client) -> dict[str, int]:
    """One pass of the recovery sweep of ``client``'s started worker (its rescuer, which
    reports through the worker's hooks): ``{"timed_out": n, "reclaim_limit": n, "rescued":
    n}``."""
    worker = client.runtime
    assert worker is not None, "start the client first"
    return dataclasses.asdict(worker.rescuer.run_once())


def _reporter(client: Client) -> Reporter:
    cfg = client.config
    return Reporter(cfg.logger, cfg.on_step_event, cfg.error_handler)


def wait_scanner(client: Client) -> WaitScanner:
    """A wait scanner on ``client``'s database, with its publisher and hooks."""
    return WaitScanner(
        database(client),
        publish=publisher(client),
        logger=client.config.logger,
        reporter=_reporter(client),
    )


def deadline_scanner(client: Client) -> DeadlineScanner:
    """A deadline scanner on ``client``'s database, with its publisher and hooks."""
    return DeadlineScanner(
        database(client),
        publish=publisher(client),
        logger=client.config.logger,
        reporter=_reporter(client),
    )


def get_step_output_text(client: Client, run_id: str, node: str) -> str | None:
    """The output of ``(run_id, node)`` as JSON text when that node completed, else None
    (what a worker reads when its output cache misses)."""
    with database(client).autocommit_session() as s:
        row = steps.step_get_output(s, run_id=run_id, node=node)
    return row.output if row is not None and row.state == StepState.COMPLETED else None


def drop_wakeups(client: Client) -> None:
    """Make every wakeup ``client`` publishes from now on vanish silently, as a lost
    notification would (its own waiters are still told: the client tells them before
    publishing). For the polling-floor tests; the client is not usable normally after."""

    def lost(wakeups: Wakeups, conn: Conn | None = None) -> None:
        return None

    client.publisher.publish = lost  # type: ignore[method-assign]

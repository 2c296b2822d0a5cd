"""Failing: a failed attempt of a step (retry after backoff, or discard and resolve the
run), and the waits and deadlines that expire (Engine Design: Failure Propagation; Leases
and Heartbeats; Client Options: WithMaxSignalWait).

Every function runs in the caller's transaction under the run row lock, except
:func:`fail_step_alone` and :func:`give_back_step_alone`, which open their own
transactions (through :func:`cyclone_flow.engine.tx.transaction`) for the worker and the
recovery sweep.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import psycopg

from cyclone_flow.db import runs, steps
from cyclone_flow.db.conn import Database, pipelined
from cyclone_flow.db.steps import FailParams
from cyclone_flow.engine import advance, child_runs
from cyclone_flow.engine.tx import Outcome, Tx, transaction
from cyclone_flow.notify import Publish
from cyclone_flow.states import RunState, StepState
from cyclone_flow.text import printable


def fail_step(tx: Tx, failure: FailParams, *, backoff: bool = True) -> Outcome | None:
    """A failed attempt: retry after backoff while attempts remain (and not
    ``failure.permanent``), else discard and resolve the run. ``failure.owner`` None lets
    the recovery sweep fail a step it does not own; the generation still guards it.
    ``backoff`` False: retry at once, without reading the step's backoff (see
    :func:`fail_step_alone`).

    The run lock and the attempt's compare-and-swap go in one round trip (a pipeline,
    executed in that order). Returns None when stale. Raises ``psycopg.DataError`` when the
    stored backoff cannot be computed (the transaction is then failed)."""
    error = printable(failure.error) or ""
    traceback = printable(failure.traceback)
    if error is not failure.error or traceback is not failure.traceback:  # rare: a copy
        failure = replace(failure, error=error, traceback=traceback)
    run_id = failure.run_id
    send = (
        steps.send_step_fail_if_leased
        if backoff
        else steps.send_step_fail_without_backoff_if_leased
    )
    with pipelined(tx.conn):
        runs.send_run_lock(tx, run_id=run_id)
        failing = send(tx, failure)
    row = failing.result()
    if row is None:
        return None
    effects = tx.effects
    if row.state == StepState.AVAILABLE:
        effects.wakeups.queues.add(row.queue)
        return Outcome(row.state, None, effects.wakeups, queue=row.queue)
    if row.parent_node is not None:  # a fan-out item: its fan-out node is discarded
        advance.item_discarded(tx, run_id, row.node, row.parent_node, error)
    else:
        advance.resolve_discard(tx, run_id, row.node, error)
    return Outcome(
        row.state,
        effects.finished.get(run_id),
        effects.wakeups,
        effects.cancelled_in(run_id),
        queue=row.queue,
        engine_events=tuple(effects.events),
    )


def fail_step_alone(
    db: Database, publish: Publish | None, failure: FailParams
) -> tuple[Outcome | None, psycopg.DataError | None]:
    """:func:`fail_step` in a transaction of its own on a pool connection of ``db``,
    committed (and its wakeups handed to ``publish``) before it returns.

    When the step's stored backoff cannot be computed (``psycopg.DataError``, e.g. a
    definition written by hand or by an older version), the attempt is recorded all the
    same in a fresh transaction, without backoff: retried at once while attempts remain,
    else discarded, with a note in its error. A failed attempt is thus never left to its
    lease (which would re-run the step at every reclaim, for ever).

    Returns ``(outcome, error)``: the outcome (None when stale) and the data error of the
    first try (None when there was none), for the caller to log."""
    try:
        with transaction(db, publish) as tx:
            return fail_step(tx, failure), None
    except psycopg.DataError as exc:
        first = exc
    reason = str(first).strip().splitlines()[0] if str(first).strip() else type(first).__name__
    note = f"{failure.error or ''} [no retry backoff: it could not be computed ({reason})]"
    with transaction(db, publish) as tx:
        return fail_step(tx, replace(failure, error=note.lstrip()), backoff=False), first


def give_back_step_alone(
    db: Database,
    *,
    step_id: int,
    generation: int,
    owner: str,
    reason: str,
    delay_s: float,
) -> str | None:
    """running -> available for a step ``owner`` cannot import or may not run (issue
    30.2): no attempt and no reclaim charged, claimable again in ``delay_s`` seconds,
    ``reason`` kept on the step (``import_wait_reason``), in a transaction of its own.
    Needs no run lock: the run's state does not change. Returns the step's queue, or None
    when stale or when the node's ``import_wait`` has passed since the first give-back
    (the caller then discards it: :func:`fail_step_alone`, kind ``import_error``, guarded
    by the same lease, so a stale step stays untouched)."""
    with transaction(db) as tx:
        row = steps.step_give_back_if_leased(
            tx,
            id=step_id,
            generation=generation,
            owner=owner,
            reason=printable(reason) or "",
            delay_us=int(delay_s * 1_000_000),
        )
    return None if row is None else row[0]


def expire_wait(tx: Tx, run_id: str, node: str, error: str, now: datetime | None = None) -> bool:
    """Discard a waiting node whose ``wait_until`` passed at ``now`` (default the
    database's clock; kind ``timeout``), cancel the tree of the child run it waited for,
    and apply its dependents' policy, under the run lock. False when stale (decided
    meanwhile)."""
    runs.run_lock(tx, run_id=run_id)
    row = steps.step_discard_if_wait_expired(tx, run_id=run_id, node=node, error=error, now=now)
    if row is None:
        return False
    if row.child_run_id is not None:
        child_runs.cancel_tree(
            tx, row.child_run_id, True, f"parent node {node} stopped waiting: {error}"
        )
    advance.resolve_discard(tx, run_id, node, error)
    return True


def fail_past_deadline(
    tx: Tx, run_id: str, now: datetime | None = None
) -> tuple[tuple[str, ...], str] | None:
    """running -> failed with kind ``deadline`` when its deadline passed at ``now``
    (default the database's clock): its unfinished steps are cancelled, its child runs
    too, and the node of a parent run waiting for it is discarded (kind
    ``child_failed``), under the run lock. Returns the nodes cancelled and the run's
    error; None when stale."""
    runs.run_lock(tx, run_id=run_id)
    row = runs.run_fail_if_past_deadline(tx, run_id=run_id, now=now)
    if row is None:
        return None
    cancelled = steps.step_cancel_if_unfinished(tx, run_id=run_id, error=row.error)
    parent = advance.parent_of(row.parent_run_id, row.parent_node)
    advance.run_ended(tx, run_id, RunState.FAILED, parent, row.error)
    return tuple(cancelled), row.error

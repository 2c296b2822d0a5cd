"""Completing steps: one step in the caller's completion transaction, or a batch of steps
in one transaction (the group commit). Each sends its statements in one pipeline, in this
order: generic plans, the run lock(s), the compare-and-swap, the release of dependents and
the run completion (why this is safe: :func:`cyclone_flow.engine.advance.send_node_advance`).
"""

from __future__ import annotations

from collections.abc import Sequence

from cyclone_flow.db import runs, session, steps
from cyclone_flow.db.conn import pipelined
from cyclone_flow.db.rows import ClaimedStep, CompletedLease
from cyclone_flow.engine import advance
from cyclone_flow.engine.tx import Outcome, Tx
from cyclone_flow.errors import IsolationLevelError
from cyclone_flow.notify import Wakeups
from cyclone_flow.states import StepState

READ_COMMITTED = "read committed"  # as current_setting('transaction_isolation') says it


def complete_step(
    tx: Tx,
    step: ClaimedStep,
    owner: str,
    output_json: str,
    *,
    check_isolation: bool = False,
) -> Outcome | None:
    """running -> completed with ``output_json`` under the claim's lease, and the run's
    advance: dependents whose deps all completed are released (fan-out, child and
    wait_signal nodes start), the run completes when nothing is left (and a parent's child
    node with it); a fan-out item releases the next item or completes its fan-out node.

    One round trip for the run lock, the compare-and-swap and (not for a fan-out item) the
    release and the run's completion; more only for what that starts. Returns None when
    stale: the caller must roll back, business writes included. Raises the psycopg error of
    a failed statement (the transaction is then failed and must be rolled back; the
    connection stays usable).

    ``check_isolation`` (the handler used the transaction): the same round trip also reads
    the transaction's isolation and the session's default, and raises
    :class:`IsolationLevelError` (roll back) when the handler changed either: both are
    READ COMMITTED on every engine connection (:func:`cyclone_flow.db.conn.pin_read_committed`
    sets the session's default at its first checkout, and a transaction that changed it
    only ever rolls back), and the engine's checks need READ COMMITTED."""
    parent = step.parent_node  # a fan-out item's fan-out node
    with pipelined(tx.conn):
        isolation = session.send_session_get_isolation(tx) if check_isolation else None
        session.send_session_force_generic_plans(tx)
        runs.send_run_lock(tx, run_id=step.run_id)
        completing = steps.send_step_complete_if_leased(
            tx, id=step.id, owner=owner, generation=step.lease_generation, output=output_json
        )
        sent = None if parent is not None else advance.send_node_advance(tx, step.run_id, step.node)
    if isolation is not None:
        current, default = isolation.result()
        if current != READ_COMMITTED:
            raise IsolationLevelError(step.run_id, step.node, current)
        if default != READ_COMMITTED:
            raise IsolationLevelError(step.run_id, step.node, f"session default {default}")
    completed = completing.result()
    if completed is None:
        return None
    if parent is not None:
        advance.items_completed(tx, step.run_id, parent)
    elif sent is not None:
        advance.node_advanced(tx, step.run_id, sent)
    return _completed(tx, step.run_id, completed.output)


def complete_steps(
    tx: Tx, owner: str, batch: Sequence[tuple[ClaimedStep, str]]
) -> list[Outcome | None]:
    """Group commit: :func:`complete_step` for a batch of ``(step, output_json)`` of steps
    whose handlers did not open ``ctx.completion_tx()``, in the caller's one transaction.

    The run row locks of the whole batch are taken first, in one global order
    (``run_lock_many``); one statement completes every step, each row guarded by its own
    claim; then the runs advance as one :func:`complete_step` per step would, in a few
    set-based statements, the first ones in the same round trip. Returns one entry per
    ``batch`` entry, in order: its Outcome (what its run's advance did is reported with the
    run's last step of the batch), or None when stale. Raises ``psycopg.Error`` when the
    transaction failed (nothing of it commits)."""
    if not batch:
        return []
    nodes = [(s.run_id, s.node) for s, _ in batch if s.parent_node is None]
    node_runs = sorted({run_id for run_id, _ in nodes})
    # rows in id order, as the heartbeat sends them (where the plan walks the arrays, both
    # lock in one order)
    ordered = sorted(batch, key=lambda entry: entry[0].id)
    releasing = finishing = None
    with pipelined(tx.conn):
        session.send_session_force_generic_plans(tx)
        runs.send_run_lock_many(tx, run_ids=sorted({s.run_id for s, _ in batch}))
        completing = steps.send_step_complete_if_leased_many(
            tx,
            ids=[s.id for s, _ in ordered],
            generations=[s.lease_generation for s, _ in ordered],
            outputs=[output for _, output in ordered],
            owner=owner,
        )
        if nodes:
            releasing = steps.send_step_release_dependents_if_ready(
                tx, run_ids=[r for r, _ in nodes], nodes=[n for _, n in nodes]
            )
            finishing = runs.send_run_complete_if_done(tx, run_ids=node_runs)
    completed: dict[tuple[int, int], CompletedLease] = {
        (row.id, row.lease_generation): row for row in completing.result()
    }
    items: dict[tuple[str, str], int] = {}
    last: dict[str, int] = {}  # run id -> index in batch of its last completed step
    for i, (step, _) in enumerate(batch):
        row = completed.get((step.id, step.lease_generation))
        if row is None:
            continue
        last[step.run_id] = i
        if row.parent_node is not None:  # a fan-out item
            key = (step.run_id, row.parent_node)
            items[key] = items.get(key, 0) + 1
    txs = {run_id: tx.fresh() for run_id in {s.run_id for s, _ in batch}}
    advance.advance_completed(
        txs,
        releasing.result() if releasing is not None else [],
        items,
        finishing.result() if finishing is not None else [],
    )
    # what a run's advance did is reported with its last step of the batch
    outcomes: list[Outcome | None] = []
    for i, (step, _) in enumerate(batch):
        row = completed.get((step.id, step.lease_generation))
        if row is None:
            outcomes.append(None)
        elif last[step.run_id] != i:
            outcomes.append(Outcome(StepState.COMPLETED, None, Wakeups(), output_text=row.output))
        else:
            outcomes.append(_completed(txs[step.run_id], step.run_id, row.output))
    # a run none of whose steps completed here (all stale) cannot have advanced; should it
    # have, its wakeups still go out with the batch
    reported = next((o for o in reversed(outcomes) if o is not None), None)
    for run_id, run_tx in txs.items():
        if run_id not in last and reported is not None:
            reported.wakeups.merge(run_tx.effects.wakeups)
    return outcomes


def _completed(tx: Tx, run_id: str, output_text: str | None) -> Outcome:
    """The Outcome of a completed step of run ``run_id`` whose advance ``tx`` collected."""
    effects = tx.effects
    return Outcome(
        StepState.COMPLETED,
        effects.finished.get(run_id),
        effects.wakeups,
        effects.cancelled_in(run_id),
        engine_events=tuple(effects.events),
        output_text=output_text,
    )

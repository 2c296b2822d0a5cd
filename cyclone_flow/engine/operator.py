"""Operator actions on a run: cancel and retry, each under the run lock in the caller's
transaction (the caller rolls back when one raises)."""

from __future__ import annotations

from cyclone_flow.db import deps, runs, steps
from cyclone_flow.engine import advance, sequences
from cyclone_flow.engine.tx import Tx
from cyclone_flow.errors import RunNotFoundError, RunStateError
from cyclone_flow.states import RunState, StepState


def cancel_run(tx: Tx, run_id: str, reason: str) -> tuple[bool, tuple[str, ...]]:
    """running -> cancelled and every non-terminal step -> cancelled, with the trees of its
    child runs; a cancelled child run discards the node of its parent that waited for it
    (kind ``child_failed``). A failed run of a sequence can be cancelled too, which lets
    the runs held behind it go on (released in the same transaction).

    Returns ``(False, ())`` when the run was already terminal (a racing completion won),
    else ``(True, the run's cancelled nodes)``; the wakeups of every run this ended or
    released go to ``tx.effects``. Raises RunNotFoundError."""
    if runs.run_lock(tx, run_id=run_id) is None:
        raise RunNotFoundError(run_id)
    done = runs.run_cancel_if_running(tx, run_id=run_id, error=reason)
    if done is None and not sequences.cancel_failed(tx, run_id, reason):
        return False, ()
    cancelled = steps.step_cancel_if_unfinished(tx, run_id=run_id, error=reason)
    parent = None if done is None else advance.parent_of(done.parent_run_id, done.parent_node)
    advance.run_ended(tx, run_id, RunState.CANCELLED, parent, reason)
    key = sequences.key_of(tx, run_id)
    if key is not None:  # Sequences: the next run goes
        advance.release_sequence(tx, key)
    return True, tuple(cancelled)


def retry_run(tx: Tx, run_id: str, node: str | None = None) -> list[str]:
    """Operator retry of a failed or cancelled run (or a completed one whose cancel_branch
    policy left a discarded step): its discarded steps (all, or only ``node``) and every
    cancelled step go back to pending/available with attempts and reclaims reset, and the
    run back to running. Returns the reset nodes (not fan-out items); the wakeups go to
    ``tx.effects``. Raises RunNotFoundError, RunStateError."""
    state = runs.run_lock(tx, run_id=run_id)
    if state is None:
        raise RunNotFoundError(run_id)
    run = runs.run_get(tx, run_id=run_id)
    if run is not None and run.parent_run_id is not None:
        raise RunStateError(
            run_id,
            state,
            f"it is a child run of run {run.parent_run_id} (node {run.parent_node}): retry the "
            "parent run, which starts a new child run",
        )
    if state is RunState.RUNNING or (
        state is RunState.COMPLETED and not steps.step_list_discarded(tx, run_id=run_id)
    ):
        raise RunStateError(
            run_id,
            state,
            "only failed or cancelled runs, or completed runs with a discarded step "
            "(on_dep_failure: cancel_branch), can be retried",
        )
    if state is not RunState.FAILED and sequences.key_of(tx, run_id) is not None:
        raise RunStateError(
            run_id,
            state,
            "it is in a sequence and the runs behind it have been released; submit a new "
            "run instead (only a failed run of a sequence can be retried)",
        )
    if node is not None:
        row = steps.step_get_state(tx, run_id=run_id, node=node)
        if row is None:
            raise RunStateError(run_id, state, f"it has no node {node!r}")
        if row.parent_node is not None:
            raise RunStateError(
                run_id,
                state,
                f"{node!r} is an item of fan-out node {row.parent_node!r}: retry that node",
            )
        if row.state not in (StepState.DISCARDED, StepState.CANCELLED):
            raise RunStateError(
                run_id, state, f"node {node!r} is {row.state}, not discarded or cancelled"
            )
    runs.run_reopen_if_terminal(tx, run_id=run_id)
    reset = steps.step_reset_if_discarded_or_cancelled(tx, run_id=run_id, node=node)
    # A step left discarded must not sit upstream of a reset one: that step could never
    # run and the run would never end. Refuse (the caller rolls the transaction back).
    reset_nodes = {r.node for r in reset}
    for blocker in steps.step_list_discarded(tx, run_id=run_id):
        below = deps.dep_list_downstream(tx, run_id=run_id, node=blocker)
        if reset_nodes & {d.node for d in below}:
            raise RunStateError(
                run_id,
                state,
                f"node {node!r} is downstream of the discarded node {blocker!r}: "
                f"retry {blocker!r} or the whole run",
            )
    advance.release(tx, run_id, None)
    # nothing to redo (e.g. every step had completed): finish the run again
    advance.complete_run_if_done(tx, run_id)
    return [r.node for r in reset if r.parent_node is None]

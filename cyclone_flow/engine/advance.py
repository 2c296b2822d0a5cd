"""Advancing a run inside the transaction that changed it: the recursive core.

Everything here runs in the caller's transaction (a :class:`~cyclone_flow.engine.tx.Tx`),
under the run row lock (which, for a child run, is taken after the lock of the top run of
its tree: ``run_lock``), and records what it did in the transaction's effects: the
wakeups to publish after the commit, the runs that became terminal, the steps it
cancelled, the nodes it decided. Nothing here commits.

The node types (Engine Design: Why Static DAGs; Failure Propagation):

- ``action``: released ``available``; a worker claims it.
- ``fan_out``: released ``waiting`` and started at once (:mod:`cyclone_flow.engine.fan_out`).
- ``child``: released ``waiting``; its child run is inserted at once
  (:mod:`cyclone_flow.engine.child_runs`).
- ``wait_signal``: released ``waiting``; a signal that arrived earlier is consumed at once,
  in the same transaction; otherwise ``deliver_signal`` completes it later with the
  signal's payload.

A released node with a ``when:`` condition is decided first, in the same transaction
(:mod:`cyclone_flow.engine.conditions`): false skips it (no item, no child run, no wait)
and its ``on_dep_skip: skip`` descendants (skip-cascade); a skipped node satisfies its
dependents like a completed one, with a null output.

``child`` and ``wait_signal`` nodes with a ``max_wait`` (or a wait_signal node under the
submitting client's ``max_signal_wait``) get a ``wait_until``; the wait scanner discards
them with kind ``timeout`` after it.

The lower modules (``fan_out``, ``child_runs``, ``sequences``) run their statements and
return decisions; this module applies them, which is where the recursion lives (a node
completed releases its dependents, which may complete at once; a run completed completes
its parent's node or releases the next run of its sequence; a discard fails the run or
cancels a branch, which ends child runs and discards their parents' nodes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from cyclone_flow.db import deps, runs, signals, steps
from cyclone_flow.db.conn import Pending, pipelined
from cyclone_flow.db.rows import CompletedRun, DecidedNode, NodeInfo, ReleasedStep
from cyclone_flow.engine import child_runs, conditions, fan_out, sequences
from cyclone_flow.engine.tx import Discard, EngineEvent, Tx
from cyclone_flow.states import ErrorKind, EventKind, RunState, StepState

NodeAdvance = tuple[Pending[list[ReleasedStep]], Pending[list[CompletedRun]]]
"""The two statements :func:`send_node_advance` sent, read by :func:`node_advanced`."""


# -- a new run -----------------------------------------------------------------------------


def insert_run_steps(
    tx: Tx,
    run_id: str,
    workflow_id: int,
    root_run_id: str | None,
    *,
    queue: str | None = None,
    priority: int | None = None,
    hold: bool = False,
    run_at: datetime | None = None,
    delay_us: int | None = None,
    traceparent: str | None = None,
) -> None:
    """Insert the steps and deps of a new run from its definition's plan, then start its
    root nodes that are not actions (none when ``hold``: a held run of a sequence, released
    later by :func:`release_sequence`). ``queue``/``priority`` replace those of the nodes
    that do not set their own; ``run_at`` or ``delay_us`` (microseconds from now) is when
    the run starts: no step of it is claimable before then. Each step carries the run's
    trace context ``traceparent`` (None: not traced)."""
    rows = steps.step_insert_plan(
        tx,
        run_id=run_id,
        root_run_id=root_run_id,
        workflow_id=workflow_id,
        queue=queue,
        priority=priority,
        hold=hold,
        run_at=run_at,
        delay_us=delay_us,
        traceparent=traceparent,
    )
    tx.effects.wakeups.queues.update(
        r.queue for r in rows if r.state == StepState.AVAILABLE and r.due
    )
    deps.dep_insert_plan(tx, run_id=run_id, workflow_id=workflow_id)
    if not hold and any(r.state == StepState.PENDING for r in rows):
        release(tx, run_id, None)


# -- release and start ---------------------------------------------------------------------


def release(tx: Tx, run_id: str, node: str | None) -> bool:
    """Release the dependents of ``node`` whose deps all completed (``node`` None: every
    ready pending node of the run); start those that are not actions. Returns whether any
    node was released."""
    if node is None:
        released = steps.step_release_if_ready(tx, run_id=run_id)
    else:
        released = steps.step_release_dependents_if_ready(tx, run_ids=[run_id], nodes=[node])
    start_released(tx, run_id, released)
    return bool(released)


def start_released(tx: Tx, run_id: str, released: Sequence[ReleasedStep]) -> None:
    """After a release of ``released`` steps of run ``run_id``: decide the ``when:`` of
    those that have one (:func:`decide_condition`), then wake the queues of released
    actions and start the released nodes of other types."""
    for step in released:
        if step.condition is not None and not decide_condition(tx, run_id, step):
            continue
        if step.type == "action":
            tx.effects.wakeups.queues.add(step.queue)
        else:
            start_node(tx, run_id, step.node)


def decide_condition(tx: Tx, run_id: str, step: ReleasedStep) -> bool:
    """Decide the ``when:`` of the just released ``step``: True when it runs; else it is
    skipped (skip-cascade follows) or, when its condition cannot be evaluated, discarded
    (kind ``input_error``; the dependents' policy follows), and False."""
    decision = conditions.decide(tx, run_id, step.node, step.condition or "true")
    if decision is None:
        return True
    if isinstance(decision, conditions.Skip):
        queue = steps.step_skip_if_released(
            tx, run_id=run_id, node=step.node, reason=decision.reason
        )
        if queue is not None:
            nodes_skipped(tx, run_id, [(step.node, queue)])
        return False
    error, kind = decision.error, str(ErrorKind.INPUT_ERROR)
    queue = steps.step_discard_if_released(
        tx, run_id=run_id, node=step.node, error=error, error_kind=kind
    )
    if queue is not None:
        engine_discarded(tx, run_id, step.node, error, kind, queue)
    return False


def nodes_skipped(tx: Tx, run_id: str, skipped: Sequence[tuple[str, str]]) -> None:
    """The ``(node, queue)`` pairs of ``run_id`` were just skipped: skip their pending
    descendants reached through ``on_dep_skip: skip`` dependents (one statement), release
    the dependents whose dependencies are now all done (``on_dep_skip: run``), or complete
    the run when nothing was released and nothing is left."""
    below = steps.step_skip_dependents_if_pending(
        tx, run_id=run_id, nodes=[node for node, _ in skipped]
    )
    every = [*skipped, *((s.node, s.queue) for s in below)]
    for node, queue in every:
        tx.effects.events.append(EngineEvent(EventKind.SKIPPED, run_id, node, queue=queue))
    released = steps.step_release_dependents_if_ready(
        tx, run_ids=[run_id] * len(every), nodes=[node for node, _ in every]
    )
    start_released(tx, run_id, released)
    if not released:
        complete_run_if_done(tx, run_id)


def start_node(tx: Tx, run_id: str, node: str) -> None:
    """Start the released (now waiting) fan_out, child or wait_signal ``node``."""
    info = steps.step_get_node_info(tx, run_id=run_id, node=node)
    if info is None:
        return
    if info.type == "fan_out":
        decision = fan_out.start(tx, run_id, node, info.queue, info.over)
        if isinstance(decision, Discard):
            discard_waiting(tx, run_id, node, decision.error, decision.kind)
        elif decision == "finish":
            _finish_fan_out(tx, run_id, node)
    elif info.type == "child":
        _start_child(tx, run_id, node, info)
    elif info.type == "wait_signal":
        steps.step_set_wait_until_if_waiting(tx, run_id=run_id, node=node)
        consume_signal(tx, run_id, node, info.signal)


def _start_child(tx: Tx, run_id: str, node: str, info: NodeInfo) -> None:
    started = child_runs.start(
        tx,
        run_id,
        node,
        info.input,
        info.child_workflow_id,
        info.child_input_schema,
        info.not_before,
    )
    if isinstance(started, Discard):
        discard_waiting(tx, run_id, node, started.error, started.kind)
        return
    insert_run_steps(
        tx,
        started.child_id,
        started.workflow_id,
        started.root_id,
        run_at=info.not_before,
        traceparent=started.traceparent,
    )


# -- a node completed ----------------------------------------------------------------------


def node_completed(tx: Tx, run_id: str, node: str) -> None:
    """``node`` just completed: release its dependents, or complete the run when nothing
    was released and nothing is left. Both statements go in one round trip
    (:func:`send_node_advance`)."""
    with pipelined(tx.conn):
        sent = send_node_advance(tx, run_id, node)
    node_advanced(tx, run_id, sent)


def send_node_advance(tx: Tx, run_id: str, node: str) -> NodeAdvance:
    """Send the advance after ``node`` completed: ``step_release_dependents_if_ready``, then
    ``run_complete_if_done``; read them with :func:`node_advanced` after the pipeline.

    Why sending them in one pipeline (even before the completion's own compare-and-swap
    is known, as :mod:`cyclone_flow.engine.complete` does) is the same as sending the
    statements one by one:

    - the statements of a pipeline execute in order in the transaction: ``run_lock``
      takes the run row lock (top run first) before the step's UPDATE, as always;
    - sending the run's completion without waiting for the release's result is the same
      as "complete the run only when nothing was released": ``run_complete_if_done`` is
      guarded by "no non-terminal step of the run remains", and a step just released is
      ``available`` or ``waiting``, so after a release that released anything it changes
      nothing;
    - both are guarded, idempotent functions of the run's rows, run under the run row
      lock: sent after a stale (zero-row) completion they change nothing that was not
      already due, and that transaction is rolled back anyway;
    - a fan-out item's ``step_add_items_done_if_waiting`` counts unconditionally (not
      idempotent), so it is sent only after the compare-and-swap returned its row;
    - an error of any statement (e.g. a handler left its completion transaction failed)
      is raised when the pipeline block ends, as the same psycopg error, and the
      connection has left pipeline mode by then, so its rollback works as before.
    """
    released = steps.send_step_release_dependents_if_ready(tx, run_ids=[run_id], nodes=[node])
    done = runs.send_run_complete_if_done(tx, run_ids=[run_id])
    return released, done


def node_advanced(tx: Tx, run_id: str, sent: NodeAdvance) -> None:
    """Read the results of :func:`send_node_advance` and go on: start the released nodes,
    or finish the completed run."""
    released, done = sent
    start_released(tx, run_id, released.result())
    for completed in done.result():  # never together with a release (send_node_advance)
        run_completed(tx, completed)


def advance_completed(
    txs: Mapping[str, Tx],
    released: Sequence[ReleasedStep],
    items: Mapping[tuple[str, str], int],
    finished: Sequence[CompletedRun],
) -> None:
    """Go on with the advance of a group commit's runs after its set-based statements:
    ``released`` the rows ``step_release_dependents_if_ready`` returned for the batch's
    completed nodes, ``items`` the count of completed items per ``(run_id, fan-out node)``,
    ``finished`` the rows ``run_complete_if_done`` returned for the batch's runs; ``txs``
    one Tx (with effects of its own) per run id of the batch. The end state is that of one
    :func:`node_completed` / :func:`items_completed` per step: released actions wake their
    queue and other released nodes start, each fan-out node counts its items in one
    statement, and each completed run completes its parent's node or releases the next
    run of its sequence."""
    for step in released:
        start_released(txs[step.run_id], step.run_id, [step])
    for (run_id, parent), n in items.items():
        items_completed(txs[run_id], run_id, parent, n)
    for done in finished:
        run_completed(txs[done.id], done)


def engine_completed(tx: Tx, run_id: str, node: str, queue: str | None) -> None:
    """A node the engine completed (not a worker; ``queue`` its queue): note the event,
    advance the run."""
    tx.effects.events.append(EngineEvent(EventKind.COMPLETED, run_id, node, queue=queue))
    node_completed(tx, run_id, node)


# -- fan-out items and child runs ----------------------------------------------------------


def items_completed(tx: Tx, run_id: str, parent: str, n: int = 1) -> None:
    """``n`` items of ``parent`` completed: release the next pending items, or complete
    the fan-out node after its last item."""
    if fan_out.items_completed(tx, run_id, parent, n):
        _finish_fan_out(tx, run_id, parent)


def item_discarded(tx: Tx, run_id: str, item: str, parent: str, error: str) -> None:
    """An item of ``parent`` was finally discarded: discard the fan-out node and cancel its
    other items; the node's dependents' policy then applies."""
    discarded = fan_out.discard_for_item(tx, run_id, item, parent, error)
    if discarded is not None:
        message, queue = discarded
        engine_discarded(tx, run_id, parent, message, str(ErrorKind.ITEM_FAILED), queue)


def _finish_fan_out(tx: Tx, run_id: str, node: str) -> None:
    _decided(tx, run_id, node, fan_out.finish(tx, run_id, node))


def _decided(tx: Tx, run_id: str, node: str, row: DecidedNode | None) -> None:
    """Apply the engine's completion of ``node`` (a fan-out node or a child node):
    completed, or discarded because its output is over the limit."""
    if row is None:
        return
    if row.state == StepState.COMPLETED:
        engine_completed(tx, run_id, node, row.queue)
    else:
        error, kind = row.error or "", str(ErrorKind.PAYLOAD_TOO_LARGE)
        engine_discarded(tx, run_id, node, error, kind, row.queue)


# -- runs completed, failed, cancelled -----------------------------------------------------


def complete_run_if_done(tx: Tx, run_id: str) -> RunState | None:
    """Complete ``run_id`` when no non-terminal step is left; its new state, else None."""
    done = runs.run_complete_if_done(tx, run_ids=[run_id])
    if not done:
        return None
    run_completed(tx, done[0])
    return RunState.COMPLETED


def run_completed(tx: Tx, done: CompletedRun) -> None:
    """Run ``done.id`` just completed: complete the waiting node of its parent run, or
    release the next run of its sequence (the key came back with the completion)."""
    tx.effects.finished[done.id] = RunState.COMPLETED
    tx.effects.wakeups.runs_done.add(done.id)
    if done.parent_run_id is not None and done.parent_node is not None:
        row = child_runs.completed(tx, done.parent_run_id, done.parent_node, done.id)
        _decided(tx, done.parent_run_id, done.parent_node, row)
    elif done.sequence_key is not None:
        release_sequence(tx, done.sequence_key)


def parent_of(parent_run_id: str | None, parent_node: str | None) -> tuple[str, str] | None:
    """The parent run and node of a run that just ended when it is a child run, else
    None."""
    if parent_run_id is None or parent_node is None:
        return None
    return parent_run_id, parent_node


def run_ended(
    tx: Tx, run_id: str, state: RunState, parent: tuple[str, str] | None, reason: str
) -> None:
    """``run_id`` just failed or was cancelled (its own steps are cancelled): cancel the
    trees of its child runs, and discard the node of its parent run that waited for it
    (kind ``child_failed``)."""
    tx.effects.finished[run_id] = state
    tx.effects.wakeups.runs_done.add(run_id)
    child_runs.cancel_tree(tx, run_id, False, f"parent run {run_id} {state}")
    if parent is not None:
        discard_waiting(
            tx,
            parent[0],
            parent[1],
            f"child run {run_id} {state}: {reason}",
            ErrorKind.CHILD_FAILED,
            child_run_id=run_id,
        )


def release_sequence(tx: Tx, key: str) -> bool:
    """Unhold the head run of sequence ``key`` when it is held, and release its roots as at
    submit: actions become available (a delay it was given is kept), other node types
    start. Returns whether a run was released. Also the safety net's transition for a
    sequence left stalled."""
    released = sequences.unhold_next(tx, key)
    for run_id in released:
        release(tx, run_id, None)
    return bool(released)


# -- discards ------------------------------------------------------------------------------


def discard_waiting(
    tx: Tx,
    run_id: str,
    node: str,
    error: str,
    kind: ErrorKind,
    child_run_id: str | None = None,
) -> bool:
    """waiting -> discarded, then apply the dependents' policy. False when stale."""
    queue = steps.step_discard_if_waiting(
        tx,
        run_id=run_id,
        node=node,
        error=error,
        error_kind=str(kind),
        child_run_id=child_run_id,
    )
    if queue is None:
        return False
    engine_discarded(tx, run_id, node, error, str(kind), queue)
    return True


def engine_discarded(
    tx: Tx, run_id: str, node: str, error: str, kind: str, queue: str | None
) -> None:
    """A node the engine discarded (``queue`` its queue): note the event, apply the
    dependents' policy."""
    tx.effects.events.append(EngineEvent(EventKind.DISCARDED, run_id, node, error, kind, queue))
    resolve_discard(tx, run_id, node, error)


def resolve_discard(tx: Tx, run_id: str, node: str, error: str) -> RunState | None:
    """Apply the dependents' ``on_dep_failure`` after ``node`` was discarded: fatal (a
    ``fail_run`` dependent, or a leaf) fails the run and cancels its other steps (and its
    child runs); else only the branch is cancelled (Engine Design: Failure Propagation).
    Returns the run's new state when it became terminal."""
    downstream = deps.dep_list_downstream(tx, run_id=run_id, node=node)
    fatal = not downstream or any(d.on_dep_failure == "fail_run" for d in downstream)
    if fatal:
        message = f"step {node} discarded: {error}"
        failed = runs.run_fail_if_running(
            tx, run_id=run_id, error=message, error_kind="step_discarded"
        )
        if failed is None:
            return None  # already terminal: a run fails fast only once
        cancelled = steps.step_cancel_if_unfinished(
            tx, run_id=run_id, error=f"run failed: step {node} was discarded"
        )
        tx.effects.cancelled.extend((run_id, n) for n in cancelled)
        run_ended(
            tx,
            run_id,
            RunState.FAILED,
            parent_of(failed.parent_run_id, failed.parent_node),
            message,
        )
        return RunState.FAILED
    cancelled = steps.step_cancel_nodes_if_unfinished(
        tx,
        run_id=run_id,
        nodes=[d.node for d in downstream],
        error=f"branch cancelled: upstream step {node} was discarded",
    )
    tx.effects.cancelled.extend((run_id, n) for n in cancelled)
    return complete_run_if_done(tx, run_id)


# -- signals -------------------------------------------------------------------------------


def consume_signal(tx: Tx, run_id: str, node: str, name: str | None) -> bool:
    """Consume the oldest kept signal ``name`` for the waiting ``node`` and complete it
    with the payload; False when none is kept (the node keeps waiting)."""
    if name is None:
        return False
    payload = signals.signal_consume_if_unconsumed(tx, run_id=run_id, name=name, node=node)
    if payload is None:
        return False
    queue = steps.step_complete_if_waiting(tx, run_id=run_id, node=node, output=payload)
    if queue is not None:
        engine_completed(tx, run_id, node, queue)
    return True

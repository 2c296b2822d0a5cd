"""Writing definitions and new top runs, inside the caller's transaction: the one insert
path of submit, enqueue, their ``_tx`` forms, ``ctx.submit_completion`` /
``ctx.enqueue_completion`` and schedule ticks (child runs are inserted by the engine
itself: :mod:`cyclone_flow.engine.child_runs`). Seeds: Queues and Priority, Unique Jobs,
Sequences, delayed runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from cyclone_flow._json import dumps
from cyclone_flow.db import deps, runs, steps, workflows
from cyclone_flow.db.conn import SessionLike, pipelined
from cyclone_flow.engine import advance, sequences
from cyclone_flow.engine.tx import Tx
from cyclone_flow.errors import CycloneError
from cyclone_flow.flowfile.model import Flow
from cyclone_flow.flowfile.plan import flow_plan
from cyclone_flow.options import RunOptions


class DefinitionMissingError(CycloneError):
    """The stored definition a run was to be inserted from is not stored (or not visible
    to this transaction): nothing of the run was written. An inserter that remembered the
    definition's id stores the definition again and inserts once more."""

    def __init__(self, workflow_id: int) -> None:
        self.workflow_id = workflow_id
        super().__init__(f"definition {workflow_id} of the run is not stored")


@dataclass(frozen=True)
class InsertedRun:
    """What an insert did: the run id, whether this call created it (False: a unique key
    matched an existing run and nothing was written), and whether it is held behind an
    earlier run of its sequence."""

    run_id: str
    created: bool
    held: bool = False


def store_definition(tx: Tx, flow: Flow) -> int:
    """Store ``flow`` once per ``(name, digest)`` with its compiled plan (child flows first:
    the plan names their stored definitions); return its id. Runs are inserted from the
    plan (:func:`insert_run`)."""
    child_ids = {node: store_definition(tx, child) for node, child in flow.children.items()}
    values = {
        "name": flow.name,
        "digest": flow.digest,
        "definition": dumps(flow.document),
        "plan": dumps(flow_plan(flow, child_ids)),
    }
    # None only when a concurrent first insert of the same digest had not committed when
    # the statement started: it has now (a second statement sees it)
    stored = workflows.workflow_upsert(tx, **values) or workflows.workflow_upsert(tx, **values)
    if stored is None:
        raise CycloneError(f"could not store the definition of flow {flow.name!r}")
    if stored.no_plan:
        workflows.workflow_fill_plan_if_missing(tx, id=stored.id, plan=values["plan"])
    return stored.id


def insert_run(
    tx: Tx,
    workflow_id: int,
    input_json: str,
    options: RunOptions,
    *,
    output_limit: int | None = None,
    max_signal_wait_s: float | None = None,
    traceparent: str | None = None,
) -> InsertedRun:
    """Write a new top run of the stored definition ``workflow_id`` with its
    per-submission ``options``, its steps and its deps; its wakeups and engine events go
    to ``tx.effects``.

    - The run records ``output_limit`` (bytes) and ``max_signal_wait_s`` (seconds, None:
      no cap) of the submitting client, and the flow's ``deadline`` (counted from
      ``run_at`` for a delayed run); the run and its steps the submitter's trace context
      ``traceparent`` (None: not traced).
    - With a ``unique_key``: the insert does nothing while a run holds the key
      (``ON CONFLICT DO NOTHING`` on the partial unique index of ``unique_slot``); that
      run is returned (``created`` False) and nothing else is written.
    - With a ``sequence``: the sequence's row lock is taken first and the run is held
      (every step ``pending``, no node started) while an earlier run of the sequence is
      neither completed nor cancelled.
    - Steps and deps come from the definition's plan, ``queue``/``priority`` overriding
      the nodes that do not set their own; with ``run_at``/``delay_s`` no step is
      claimable before that instant (database clock). Roots that are not actions are
      started in this transaction unless the run is held.

    Raises CycloneError when ``workflow_id`` is not stored.
    """
    position: int | None = None
    held = False
    if options.sequence is not None:
        position, held = sequences.take_position(tx, options.sequence)
    delay_us = round(options.delay_s * 1_000_000) if options.delay_s else None
    while True:
        run_id = runs.run_insert(
            tx,
            workflow_id=workflow_id,
            input=input_json,
            unique_key=options.unique_key,
            unique_window_s=options.unique_window_s,
            unique_states=list(options.unique_states) if options.unique_states else None,
            sequence_key=options.sequence,
            sequence_pos=position,
            sequence_held=held,
            schedule_id=options.schedule_id,
            scheduled_for=options.scheduled_for,
            output_limit=output_limit,
            max_signal_wait_s=max_signal_wait_s,
            run_at=options.run_at,
            delay_us=delay_us,
            owner=options.owner,
            traceparent=traceparent,
            revision=options.revision,
        )
        if run_id is not None:
            break
        if options.unique_key is None:  # no conflict possible: the definition is gone
            raise DefinitionMissingError(workflow_id)
        holder = runs.run_get_unique_holder(
            tx, unique_key=options.unique_key, unique_window_s=options.unique_window_s
        )
        if holder is not None:
            return InsertedRun(holder, created=False)
        if not workflows.workflow_exists(tx, id=workflow_id):
            raise DefinitionMissingError(workflow_id)
        # the holder left its covered states between our insert and our read: insert again
    advance.insert_run_steps(
        tx,
        run_id,
        workflow_id,
        None,
        queue=options.queue,
        priority=options.priority,
        hold=held,
        run_at=options.run_at,
        delay_us=delay_us,
        traceparent=traceparent,
    )
    return InsertedRun(run_id, created=True, held=held)


def pipelinable(options: RunOptions) -> bool:
    """Whether a run with ``options`` can be written without reading anything first (no
    unique key, whose conflict decides whether to write the steps; no sequence, whose
    position is taken first; no owner, no schedule, no deployed revision to record):
    :func:`insert_run_alone`, :func:`insert_runs`."""
    return (
        options.unique_key is None
        and options.sequence is None
        and options.owner is None
        and options.schedule_id is None
        and options.revision is None
    )


def insert_run_alone(
    s: SessionLike,
    workflow_id: int,
    input_json: str,
    options: RunOptions,
    *,
    output_limit: int | None = None,
    max_signal_wait_s: float | None = None,
    traceparent: str | None = None,
) -> str | None:
    """Write a new top run whose ``options`` are :func:`pipelinable` with its steps and
    deps in one statement (``run_insert_with_plan``) on ``s``, meant for an autocommit
    connection: one round trip, one commit. For a flow whose roots are all actions
    (``Flow.roots_are_actions``: no node to start); its wakeups are ``Flow.root_queues``.
    Returns the run id, or None when the definition ``workflow_id`` is not stored (nothing
    written)."""
    return runs.run_insert_with_plan(
        s,
        id=str(uuid.uuid4()),
        workflow_id=workflow_id,
        input=input_json,
        queue=options.queue,
        priority=options.priority,
        run_at=options.run_at,
        delay_us=round(options.delay_s * 1_000_000) if options.delay_s else None,
        output_limit=output_limit,
        max_signal_wait_s=max_signal_wait_s,
        traceparent=traceparent,
    )


def insert_runs(
    tx: Tx,
    flow: Flow,
    workflow_id: int,
    items: Sequence[tuple[str, RunOptions]],
    *,
    output_limit: int | None = None,
    max_signal_wait_s: float | None = None,
    traceparent: str | None = None,
) -> list[str]:
    """Write a chunk of new top runs of the stored definition ``workflow_id`` (of
    ``flow``), each ``(input JSON text, options)`` with :func:`pipelinable` options, in
    one set-based statement per table (``run_insert_many``, ``step_insert_plan_many``,
    ``dep_insert_plan_many``, sent in one round trip); returns their ids in item order.
    Roots that are not actions are then started per run (``step_release_if_ready``, as
    :func:`insert_run` does). Every run of the chunk carries the trace context
    ``traceparent`` (None: not traced). Wakeups of the claimable root actions go to ``tx.effects``.

    Raises DefinitionMissingError (nothing written) when the definition is not stored.
    """
    if not items:
        return []
    ids = [str(uuid.uuid4()) for _ in items]
    run_ats = [o.run_at for _, o in items]
    delays = [round(o.delay_s * 1_000_000) if o.delay_s else None for _, o in items]
    with pipelined(tx.conn):
        inserted = runs.send_run_insert_many(
            tx,
            workflow_id=workflow_id,
            ids=ids,
            inputs=[text for text, _ in items],
            run_ats=run_ats,
            delay_us=delays,
            output_limit=output_limit,
            max_signal_wait_s=max_signal_wait_s,
            traceparent=traceparent,
        )
        steps.send_step_insert_plan_many(
            tx,
            workflow_id=workflow_id,
            run_ids=ids,
            queues=[o.queue for _, o in items],
            priorities=[o.priority for _, o in items],
            run_ats=run_ats,
            delay_us=delays,
            traceparent=traceparent,
        )
        deps.send_dep_insert_plan_many(tx, run_ids=ids, workflow_id=workflow_id)
    if inserted.result() != len(ids):  # 0: no definition, so no steps and deps either
        raise DefinitionMissingError(workflow_id)
    queues = tx.effects.wakeups.queues
    for _, options in items:
        if not options.delayed:
            queues |= flow.root_queues(options.queue)
    if not flow.roots_are_actions:
        for run_id in ids:
            advance.release(tx, run_id, None)
    return ids

"""Writing definitions and new top runs, inside the caller's transaction: the one insert
path of submit, enqueue, their ``_tx`` forms, ``ctx.submit_completion`` /
``ctx.enqueue_completion`` and schedule ticks (child runs are inserted by the engine
itself: :mod:`cyclone_flow.engine.child_runs`). Seeds: Queues and Priority, Unique Jobs,
Sequences, delayed runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from cyclone_flow._json import dumps
from cyclone_flow.db import runs, workflows
from cyclone_flow.engine import advance, sequences
from cyclone_flow.engine.tx import Tx
from cyclone_flow.errors import CycloneError
from cyclone_flow.flowfile.model import Flow
from cyclone_flow.flowfile.plan import flow_plan
from cyclone_flow.options import RunOptions


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
) -> InsertedRun:
    """Write a new top run of the stored definition ``workflow_id`` with its
    per-submission ``options``, its steps and its deps; its wakeups and engine events go
    to ``tx.effects``.

    - The run records ``output_limit`` (bytes) and ``max_signal_wait_s`` (seconds, None:
      no cap) of the submitting client, and the flow's ``deadline`` (counted from
      ``run_at`` for a delayed run).
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
        )
        if run_id is not None:
            break
        if options.unique_key is None:  # no conflict possible: the definition is gone
            raise CycloneError(f"definition {workflow_id} of the run is not stored")
        holder = runs.run_get_unique_holder(
            tx, unique_key=options.unique_key, unique_window_s=options.unique_window_s
        )
        if holder is not None:
            return InsertedRun(holder, created=False)
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
    )
    return InsertedRun(run_id, created=True, held=held)

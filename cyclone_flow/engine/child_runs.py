"""Child runs, as decisions for :mod:`cyclone_flow.engine.advance` (which applies them;
nothing here calls back up).

A ``child`` node is released ``waiting``; in the same transaction the child run is
inserted (from the child definition stored at the parent's submit) with its steps and
deps. The child run's completion completes the node with the child's output in the
child's completion transaction; a failed or cancelled child run discards it (kind
``child_failed``). Ending the parent run cancels the child's whole tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cyclone_flow._json import JSON, dumps
from cyclone_flow.db import runs, steps
from cyclone_flow.db.rows import DecidedNode
from cyclone_flow.engine.templating import render_template
from cyclone_flow.engine.tx import Discard, Tx
from cyclone_flow.errors import InputValidationError, TemplateError
from cyclone_flow.flowfile.inputs import validate_input
from cyclone_flow.states import ErrorKind, RunState


@dataclass(frozen=True)
class ChildStarted:
    """The child run a child node started (its steps still to insert from the stored
    definition ``workflow_id``), its tree's root run and the trace context it inherited
    from its parent run (None: not traced)."""

    child_id: str
    root_id: str
    workflow_id: int
    traceparent: str | None = None


def start(
    tx: Tx,
    run_id: str,
    node: str,
    template: JSON,
    workflow_id: int | None,
    child_schema: Any,
    not_before: datetime | None,
) -> Discard | ChildStarted:
    """Insert the child run of the released child ``node`` (its input rendered from
    ``template`` and checked against ``child_schema``; no step claimable before
    ``not_before``, the start of a delayed parent run) and make the node wait for it.
    The child run has no unique key, sequence or queue override of its own: its flow's
    queues and priorities apply. A :class:`Discard` when its input is bad."""
    try:
        if workflow_id is None:
            raise TemplateError("the child flow was not stored with the run")
        child_input = render_template(tx, run_id, template)
        child_input = validate_input(f"child of node {node}", child_schema, child_input)
        text = dumps(child_input)
    except (TemplateError, InputValidationError, TypeError, ValueError) as exc:
        return Discard(f"child input: {exc}", ErrorKind.INPUT_ERROR)
    row = runs.run_insert_child(
        tx,
        workflow_id=workflow_id,
        input=text,
        parent_run_id=run_id,
        node=node,
        not_before=not_before,
    )
    assert row is not None  # the parent run is locked and its definition stored
    steps.step_set_child_run_if_waiting(tx, run_id=run_id, node=node, child_run_id=row.id)
    steps.step_set_wait_until_if_waiting(tx, run_id=run_id, node=node)
    return ChildStarted(row.id, row.root_run_id, workflow_id, row.traceparent)


def completed(tx: Tx, run_id: str, node: str, child_run_id: str) -> DecidedNode | None:
    """Child run ``child_run_id`` completed: its parent's waiting ``node`` completes with
    its output (or is discarded: over the output limit). None when the node stopped
    waiting for this child (timeout, cancel, retry)."""
    return steps.step_complete_from_child_if_waiting(
        tx, run_id=run_id, node=node, child_run_id=child_run_id
    )


def cancel_tree(tx: Tx, run_id: str, with_self: bool, reason: str) -> None:
    """Cancel the running descendants of ``run_id`` (and ``run_id`` itself when
    ``with_self``) with their unfinished steps."""
    for rid in runs.run_cancel_tree_if_running(
        tx, run_id=run_id, with_self=with_self, error=reason
    ):
        tx.effects.finished[rid] = RunState.CANCELLED
        tx.effects.wakeups.runs_done.add(rid)

"""A node's input template rendered against its run's data, inside the transaction that
starts the node (the run input and upstream outputs read from the database; Engine
Design: Output Resolution)."""

from __future__ import annotations

from cyclone_flow._json import JSON, loads
from cyclone_flow.db import runs, steps
from cyclone_flow.engine.tx import Tx
from cyclone_flow.errors import TemplateError
from cyclone_flow.flowfile.template import SKIPPED, render
from cyclone_flow.states import StepState


def run_input(tx: Tx, run_id: str) -> JSON:
    """The run's input (None when the run does not exist)."""
    text = runs.run_get_input(tx, run_id=run_id)
    return None if text is None else loads(text)


def node_output(tx: Tx, run_id: str, node: str) -> JSON:
    """The output of ``node`` of ``run_id`` (:data:`SKIPPED` for a skipped node); raises
    TemplateError when it has not completed."""
    row = steps.step_get_output(tx, run_id=run_id, node=node)
    if row is not None and row.state == StepState.SKIPPED:
        return SKIPPED
    if row is None or row.state != StepState.COMPLETED:
        raise TemplateError(f"node {node!r} of run {run_id} has not completed")
    return loads(row.output)


def render_template(tx: Tx, run_id: str, template: JSON) -> JSON:
    """Render a node's template with the run's data (None: the run input). Raises
    TemplateError."""
    if template is None:
        return run_input(tx, run_id)
    data = run_input(tx, run_id)
    return render(template, data, lambda name: node_output(tx, run_id, name))

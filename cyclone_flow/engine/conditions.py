"""Deciding a released node's ``when:`` condition, inside the transaction that released it.

The release statements return each released step's condition (NULL for a node without
one: a flow that uses no ``when:`` never reaches this module, so its hot path runs no
statement more). For a conditional node :func:`decide` reads the run input and the
outputs of the nodes the condition names in one statement, evaluates it with
:mod:`cyclone_flow.flowfile.condition` and returns the decision;
:mod:`cyclone_flow.engine.advance` applies it (skip, or discard when the condition cannot
be evaluated). The decision is taken once: the release runs under the run row lock and
only the transaction whose release moved the step out of ``pending`` sees it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cyclone_flow._json import JSON, dumps, loads
from cyclone_flow.db import steps
from cyclone_flow.engine.tx import Tx
from cyclone_flow.errors import TemplateError
from cyclone_flow.flowfile.condition import ConditionSyntaxError, parse_condition
from cyclone_flow.states import StepState

__all__ = ["Skip", "Unevaluable", "decide"]


@dataclass(frozen=True)
class Skip:
    """The condition was false: skip the node; ``reason`` is the JSON text recorded in
    ``skip_reason`` (``{"when": TEXT, "values": {REF: VALUE}}``)."""

    reason: str


@dataclass(frozen=True)
class Unevaluable:
    """The condition could not be evaluated: discard the node with ``error``."""

    error: str


def decide(tx: Tx, run_id: str, node: str, condition: str) -> Skip | Unevaluable | None:
    """Evaluate the ``when:`` ``condition`` of the just released ``node`` of ``run_id``:
    None when the node runs, :class:`Skip` when it is skipped, :class:`Unevaluable` (a
    type error, or a condition stored by a version that parsed it differently)."""
    try:
        parsed = parse_condition(condition)
    except ConditionSyntaxError as exc:
        return Unevaluable(f"when: {condition!r} does not parse: {exc.message}")
    refs = parsed.references()
    row = steps.step_get_condition_inputs(tx, run_id=run_id, nodes=parsed.nodes()) if refs else None
    run_input = None if row is None else loads(row.run_input)
    upstream: dict[str, dict[str, JSON]] = {} if row is None else loads(row.upstream)

    def output(name: str) -> JSON:
        found = upstream.get(name)
        if found is None or found.get("state") != StepState.COMPLETED:
            return None  # skipped (or, in a stored flow lint did not check, not an ancestor)
        return found.get("output")

    try:
        holds, values = parsed.evaluate(run_input, output)
    except TemplateError as exc:
        return Unevaluable(str(exc))
    if holds:
        return None
    return Skip(dumps({"when": condition, "values": values}))

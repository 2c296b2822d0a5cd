"""Rerun a finished run from chosen nodes, reusing what it finished (``Client.rerun``).

In the caller's transaction, under the original run's row lock: a new top run of the
same stored definition is inserted with ``rerun_of`` set and every step pending; every
node that is not one of the ``from`` nodes nor downstream of one takes over the
original's result without running (``completed`` with its output, or ``skipped``, with
``reused_from`` = the source step; a fan-out node keeps its items' outputs, a child node
its child run's output); then the release starts the ``from`` nodes whose dependencies
are all reused, as at submit. The rest of the run goes as any run: a child node at or
below a ``from`` node starts a new child run, a ``when:`` is decided again.

Refused (:class:`~cyclone_flow.errors.RerunRefusedError`, nothing written) when a node
to reuse did not complete in the original run, or when a changed input would change
what such a node read (its ``input``, ``over`` or ``when:`` reads a part of
``run.input`` that changed, or it receives the whole input): ``force`` reruns those too.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from cyclone_flow._json import JSON, dumps, loads
from cyclone_flow.db import deps, runs, steps
from cyclone_flow.db.rows import RerunSource, RerunStep
from cyclone_flow.engine import advance
from cyclone_flow.engine.tx import Tx
from cyclone_flow.errors import RerunRefusedError, RunNotFoundError, RunStateError, TemplateError
from cyclone_flow.flowfile.condition import ConditionSyntaxError, parse_condition
from cyclone_flow.flowfile.inputs import validate_input
from cyclone_flow.flowfile.template import Ref, references
from cyclone_flow.states import RunState, StepState

__all__ = ["RerunPlan", "merge_patch", "rerun"]

_MISSING = object()


@dataclass(frozen=True)
class RerunPlan:
    """What a rerun did: the new run's id, the nodes it runs again and the nodes it
    reused (in the original's step order)."""

    run_id: str
    rerun: tuple[str, ...]
    reused: tuple[str, ...]


def merge_patch(target: JSON, patch: JSON) -> JSON:
    """``target`` with the JSON Merge Patch ``patch`` applied (RFC 7396): a mapping
    merges key by key, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def rerun(
    tx: Tx,
    run_id: str,
    from_nodes: Collection[str] = (),
    *,
    failed: bool = False,
    new_input: JSON = _MISSING,
    force: bool = False,
) -> RerunPlan:
    """Insert the rerun of the finished top run ``run_id`` from ``from_nodes`` (and, with
    ``failed``, from every discarded or cancelled node), with ``new_input`` (the
    original input when not given; checked against the flow's ``input_schema``). The
    wakeups go to ``tx.effects``.

    Raises RunNotFoundError; RunStateError (a running or child run, an unknown node, no
    node to rerun); RerunRefusedError (a node to reuse did not complete, or a changed
    input would change its input: ``force`` reruns it); InputValidationError."""
    if runs.run_lock(tx, run_id=run_id) is None:
        raise RunNotFoundError(run_id)
    source = runs.run_get_rerun_source(tx, run_id=run_id)
    if source is None:
        raise RunNotFoundError(run_id)
    _check_source(run_id, source)
    nodes = steps.step_list_rerun_source(tx, run_id=run_id)
    plan = _plan_rerun(
        run_id,
        source,
        nodes,
        deps.dep_list(tx, run_id=run_id),
        from_nodes,
        failed=failed,
        new_input=new_input,
        force=force,
    )
    # the writes: the new run, its steps, what it reuses, then the release as at submit
    new_id = runs.run_insert_rerun(tx, rerun_of=run_id, input=dumps(plan.input))
    if new_id is None:  # the locked run cannot be gone
        raise RunNotFoundError(run_id)
    advance.insert_run_steps(tx, new_id, source.workflow_id, None, hold=True)
    reused = plan.reused
    names = [n.node for n in reused]
    steps.step_reuse_from_run(tx, run_id=new_id, source=run_id, nodes=names)
    fan_outs = [n.node for n in reused if n.type == "fan_out" and n.state == StepState.COMPLETED]
    if fan_outs:
        steps.step_insert_reused_items(tx, run_id=new_id, source=run_id, nodes=fan_outs)
    skipped = [n.node for n in reused if n.state == StepState.SKIPPED]
    if skipped:  # a node to rerun below a reused skipped one is skipped again (cascade)
        steps.step_skip_dependents_if_pending(tx, run_id=new_id, nodes=skipped)
    advance.release(tx, new_id, None)
    advance.complete_run_if_done(tx, new_id)
    return RerunPlan(new_id, plan.rerun, tuple(names))


def _check_source(run_id: str, source: RerunSource) -> None:
    """Raise RunStateError unless ``source`` is a finished top run."""
    state = str(source.state)
    if source.parent_run_id is not None:
        raise RunStateError(
            run_id,
            state,
            f"it is a child run of run {source.parent_run_id}: rerun the parent run from "
            "its child node, which starts a new child run",
        )
    if source.state is RunState.RUNNING:
        raise RunStateError(
            run_id, state, "only a finished run can be rerun: wait for it, or cancel it first"
        )


@dataclass(frozen=True)
class _Plan:
    """What a rerun will write: the new run's ``input``, the nodes it runs again (in the
    original's step order) and the steps it reuses."""

    input: JSON
    rerun: tuple[str, ...]
    reused: list[RerunStep]


def _plan_rerun(
    run_id: str,
    source: RerunSource,
    nodes: list[RerunStep],
    needs: dict[str, list[str]],
    from_nodes: Collection[str],
    *,
    failed: bool,
    new_input: JSON,
    force: bool,
) -> _Plan:
    """The rerun of ``run_id`` (its ``source`` row, its steps ``nodes`` and each node's
    ``needs``) from ``from_nodes``, validated and decided without a statement; raises as
    :func:`rerun` does (nothing is written then)."""
    state = str(source.state)
    by_node = {n.node: n for n in nodes}
    wanted = list(dict.fromkeys(from_nodes))
    for name in wanted:
        if name not in by_node:
            known = ", ".join(by_node)
            raise RunStateError(run_id, state, f"it has no node {name!r} (its nodes: {known})")
    if failed:
        wanted += [
            n.node
            for n in nodes
            if n.state in (StepState.DISCARDED, StepState.CANCELLED) and n.node not in wanted
        ]
    if not wanted:
        raise RunStateError(
            run_id,
            state,
            "no node to rerun from: give --from NODE"
            + (" (no node was discarded or cancelled)" if failed else ""),
        )
    dependents: dict[str, list[str]] = {}
    for node, its_needs in needs.items():
        for need in its_needs:
            dependents.setdefault(need, []).append(node)
    old_input = loads(source.input)
    value = old_input
    if new_input is not _MISSING:
        value = validate_input(source.flow_name, source.input_schema, new_input)
    again = _downstream(wanted, dependents)
    if value != old_input:
        changed = [
            n.node for n in nodes if n.node not in again and _reads_changed(n, old_input, value)
        ]
        if changed and not force:
            raise RerunRefusedError(
                run_id,
                state,
                f"the new input changes what node {changed[0]!r} read"
                + (f" (and {', '.join(map(repr, changed[1:]))})" if changed[1:] else "")
                + ", which the rerun would reuse: rerun from it too, or use --force",
                tuple(changed),
            )
        again = _downstream([*wanted, *changed], dependents)
    reused = [n for n in nodes if n.node not in again]
    blockers = [n for n in reused if n.state not in (StepState.COMPLETED, StepState.SKIPPED)]
    if blockers:
        first = blockers[0]
        raise RerunRefusedError(
            run_id,
            state,
            f"node {first.node!r} would be reused (it is not at or below a --from node) but "
            f"did not complete (it is {first.state}): rerun from it too "
            f"(--from {first.node}), or use --failed",
            tuple(b.node for b in blockers),
        )
    return _Plan(value, tuple(n.node for n in nodes if n.node in again), reused)


def _downstream(start: Sequence[str], dependents: dict[str, list[str]]) -> set[str]:
    """``start`` and every node downstream of one of them."""
    out = set(start)
    stack = list(start)
    while stack:
        for child in dependents.get(stack.pop(), ()):
            if child not in out:
                out.add(child)
                stack.append(child)
    return out


def _reads_changed(step: RerunStep, old: JSON, new: JSON) -> bool:
    """Whether ``step`` read a part of the run input that differs between ``old`` and
    ``new``: a ``run.input...`` reference of its input template, ``over`` or ``when:``,
    or the whole input (an action or child node without an input template)."""
    if step.input is None and step.type in ("action", "child"):
        return True
    refs: list[Ref] = []
    try:
        refs += references(step.input) + references(step.over)
        if step.condition is not None:
            refs += [r for r, _ in parse_condition(step.condition).references()]
    except (TemplateError, ConditionSyntaxError):
        return True  # not readable here: count it as changed
    return any(_at(old, r.path) != _at(new, r.path) for r in refs if r.kind == "run")


def _at(value: Any, path: tuple[str, ...]) -> Any:
    for seg in path:
        if isinstance(value, dict) and seg in value:
            value = value[seg]
        elif isinstance(value, list) and seg.isdigit() and int(seg) < len(value):
            value = value[int(seg)]
        else:
            return _MISSING
    return value

"""How the CLI shows runs, steps and plans: the ``--json`` documents of a run and of a dry
run's plan, and the layout of their tables (node names wrapped, a step's limits in one
cell). The words for a step (its detail line, durations, why it waits, a run's queue
features) are :mod:`cyclone_flow.describe`'s, shared with the dashboard."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from cyclone_flow._json import shown_json
from cyclone_flow.db.rows import Run, Step
from cyclone_flow.durations import format_duration
from cyclone_flow.explain import Waiting
from cyclone_flow.inserter import PlannedStep, RunPreview

__all__ = [
    "limits_text",
    "name_width",
    "preview_dict",
    "preview_table_rows",
    "run_dict",
    "step_fields",
    "wrap_name",
]


def run_dict(
    run: Run,
    steps: Sequence[Step] | None = None,
    progress: Mapping[str, Mapping[str, int]] | None = None,
    waiting: Mapping[str, Waiting] | None = None,
) -> dict[str, Any]:
    """The ``--json`` form of a run (``submit --wait``, ``run``, ``status``, ``runs``):
    its row, its ``output`` null with ``output_truncated`` true when the JSON text of the
    whole run output is over :data:`~cyclone_flow._json.OUTPUT_SHOWN_BYTES` (``cyclone-flow
    output RUN`` prints it); with ``steps`` each step's fields, node-type fields
    (``progress``: the item counts of its fan-out nodes, :meth:`Client.count_items`) and
    ``output`` (null until it completed; null with ``output_truncated`` true when its JSON
    text is over the same cap: ``cyclone-flow output`` prints it); with ``waiting``
    (:meth:`Client.explain`) each step's ``waiting`` object, null for a step that is
    running or finished. Every step has the same keys (docs/cli.md)."""
    data: dict[str, Any] = {}
    for key, value in asdict(run).items():
        data[key] = value
        if key == "output":  # capped as a step's output is (docs/cli.md)
            data["output"], data["output_truncated"] = shown_json(value)
    data["state"] = str(run.state)
    if steps is not None:
        data["steps"] = [
            {
                "node": s.node,
                "state": str(s.state),
                "attempt": s.attempt,
                "max_attempts": s.max_attempts,
                "reclaims": s.reclaims,
                "queue": s.queue,
                "started_at": s.started_at,
                "finished_at": s.finished_at,
                "error": s.error,
                "error_kind": s.error_kind,
                "errors": s.errors,  # one entry per failed attempt, with its traceback
                **step_fields(s, progress or {}),
                **_output_fields(s),
                **(
                    {"waiting": w.as_dict() if (w := waiting.get(s.node)) else None}
                    if waiting is not None
                    else {}
                ),
            }
            for s in steps
        ]
    return data


def step_fields(step: Step, progress: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    """The node-type fields of a step for ``--json`` output, the same keys for every
    node type (null where one does not apply): ``type``, ``skip_reason`` (a skipped
    step), ``reused_from`` (a step a rerun reused), ``parent_node`` and ``item_index`` (a
    fan-out item), ``items`` (a fan-out node: total, done, states), ``child_run_id`` (a
    child node), ``signal`` (a wait_signal node), ``wait_until`` (a child or wait_signal
    node) and its limits (``concurrency``: key, limit; ``rate_limit``: key, limit,
    per_s)."""
    items = None
    if step.type == "fan_out":
        items = {
            "total": step.items_total,
            "done": step.items_done,
            "states": dict(progress.get(step.node, {})),
        }
    concurrency = None
    if step.concurrency_key is not None:  # docs/flow-control.md
        concurrency = {"key": step.concurrency_key, "limit": step.concurrency_limit}
    rate = None
    if step.rate_key is not None:
        rate = {"key": step.rate_key, "limit": step.rate_limit, "per_s": step.rate_per_s}
    return {
        "type": step.type,
        "skip_reason": step.skip_reason,
        "reused_from": step.reused_from,
        "parent_node": step.parent_node,
        "item_index": step.item_index,
        "items": items,
        "child_run_id": step.child_run_id if step.type == "child" else None,
        "signal": step.signal if step.type == "wait_signal" else None,
        "wait_until": step.wait_until if step.type in ("child", "wait_signal") else None,
        "concurrency": concurrency,
        "rate_limit": rate,
    }


def _output_fields(step: Step) -> dict[str, Any]:
    """A step's ``output`` (null until it completed) and ``output_truncated``: true when
    its JSON text is over :data:`~cyclone_flow._json.OUTPUT_SHOWN_BYTES` (the dashboard's
    cap), the output then null (``cyclone-flow output RUN NODE`` prints it whole)."""
    if step.state != "completed":
        return {"output": None, "output_truncated": False}
    value, cut = shown_json(step.output)
    return {"output": value, "output_truncated": cut}


def preview_dict(plan: RunPreview) -> dict[str, Any]:
    """The ``submit --dry-run --json`` form of a plan: ``dry_run`` true, ``flow``,
    ``path``, ``input`` (defaults filled), ``input_bytes``, ``options`` (the submission
    options given, durations in seconds, ``run_at`` ISO 8601), ``steps`` in run order
    (``node``, ``type``, ``call``, ``queue``, ``priority``, ``needs``, ``state``,
    ``max_attempts``, ``timeout_s``, the node type's fields, ``concurrency`` / ``rate_limit``
    with their rendered ``key`` for a node with limits and, for a node with one, its
    ``when`` and what submit decides: ``skip_reason`` or ``error``) and ``child_flows``."""
    opts = plan.options
    options = {
        "queue": opts.queue,
        "priority": opts.priority,
        "run_at": opts.run_at.isoformat() if opts.run_at else None,
        "delay_s": opts.delay_s,
        "unique_key": opts.unique_key,
        "unique_window_s": opts.unique_window_s,
        "unique_states": list(opts.unique_states) if opts.unique_states else None,
        "sequence": opts.sequence,
    }
    return {
        "dry_run": True,
        "flow": plan.flow,
        "path": plan.path,
        "input": plan.input,
        "input_bytes": plan.input_bytes,
        "options": {k: v for k, v in options.items() if v is not None},
        "steps": [_planned_dict(step) for step in plan.steps],
        "child_flows": list(plan.child_flows),
    }


def _planned_dict(step: PlannedStep) -> dict[str, Any]:
    return {
        "node": step.node,
        "type": step.type,
        "call": step.call,
        "queue": step.queue,
        "priority": step.priority,
        "needs": list(step.needs),
        "state": step.state,
        "max_attempts": step.max_attempts,
        "timeout_s": step.timeout_s,
        **step.detail,
    }


_NAME_BREAK = re.compile(r"(?<=[_.\-/])")


def wrap_name(name: str, width: int) -> str:
    """``name`` (a node name: letters, digits, ``_``, ``-``) in lines of at most ``width``
    characters, broken only after a ``_``, ``-``, ``.`` or ``/`` where it can be (a part
    longer than ``width`` is a line of its own): ``fetch_customer_`` / ``records``."""
    lines: list[str] = []
    for part in _NAME_BREAK.split(name):
        if lines and len(lines[-1]) + len(part) <= width:
            lines[-1] += part
        else:
            lines.append(part)
    return "\n".join(lines)


def name_width(names: list[str], terminal_width: int) -> int:
    """How wide a table's node column is on a terminal of ``terminal_width`` columns: the
    longest name when it takes at most a fifth of it (at least 12), else that fifth, but
    never narrower than the longest unbreakable part of a name (:func:`wrap_name`)."""
    longest = max((len(n) for n in names), default=0)
    parts = max((len(p) for n in names for p in _NAME_BREAK.split(n)), default=0)
    return max(parts, min(longest, max(12, terminal_width // 5)))


def limits_text(concurrency: Any, rate_limit: Any) -> str:
    """A step's limits in one cell: ``concurrency KEY <= N``, ``rate KEY <= N per PERIOD``
    (the period as a flow file writes it: ``1s``, ``2m``; ``; ``-joined), from the
    ``{"key", "limit"[, "per_s"]}`` objects of ``--json`` (None: no such limit); "" without
    limits."""
    parts = []
    if isinstance(concurrency, Mapping):
        parts.append(f"concurrency {concurrency.get('key')} <= {concurrency.get('limit')}")
    if isinstance(rate_limit, Mapping):
        per = format_duration(float(rate_limit.get("per_s") or 0))
        parts.append(f"rate {rate_limit.get('key')} <= {rate_limit.get('limit')} per {per}")
    return "; ".join(parts)


def preview_table_rows(plan: RunPreview) -> list[tuple[str, ...]]:
    """The rows of ``submit --dry-run``'s table: position, node, type, queue, priority,
    needs, state (with what decides it: :func:`_planned_state_text`), what it runs
    (its call; a child flow, an awaited signal, a fan-out's list) and its limits with
    their rendered keys (:func:`limits_text`)."""
    rows: list[tuple[str, ...]] = []
    for i, step in enumerate(plan.steps, 1):
        runs = step.call or ""
        if step.type == "child":
            runs = f"child flow {step.detail.get('flow')}"
        elif step.type == "wait_signal":
            runs = f"signal {step.detail.get('signal')!r}"
        elif step.type == "fan_out":
            runs = f"{runs} over {step.detail.get('over')}"
        rows.append(
            (
                str(i),
                step.node,
                step.type,
                step.queue,
                str(step.priority),
                ", ".join(step.needs) or "-",
                _planned_state_text(step),
                runs,
                limits_text(step.detail.get("concurrency"), step.detail.get("rate_limit")),
            )
        )
    return rows


def _planned_state_text(step: PlannedStep) -> str:
    """A dry run's state cell: the state, and for a node with a ``when:`` or skipped with
    a dependency, what decides it: ``available (when: true)``, ``skipped (when: false)``,
    ``skipped (upstream a skipped)``, ``discarded (ERROR)``, ``pending (when:
    decided on release)``."""
    # a cell of a table, not describe_skip's sentence: it names only what decided the
    # state (the `when:` text is in the flow file; --json carries the skip_reason)
    reason = step.detail.get("skip_reason")
    if isinstance(reason, dict) and "upstream" in reason:
        return f"{step.state} (upstream {reason['upstream']} skipped)"
    if step.detail.get("when") is None:
        return step.state
    if step.state == "pending":
        return "pending (when: decided on release)"
    if step.state == "discarded":
        return f"discarded ({step.detail.get('error')})"
    return f"{step.state} (when: {'false' if step.state == 'skipped' else 'true'})"

"""The one wording of a run and its steps, for every display: the CLI (``status``,
``status --watch``, ``graph --run``) prints these strings and the dashboard's templates
call the same functions (Jinja globals registered by ``ui/app.py``), laying out only the
cells. Pure: rows in, text out.

- a step's state word (:func:`state_word`) and attempt (:func:`describe_attempt`);
- its detail line (:func:`step_detail`, in parts: :func:`detail_parts`): ``items 42/100
  done, 8 running``, ``awaits signal 'approved' until …``, ``skipped: when … was false``
  (:func:`describe_skip`), ``reused from run 3f2a9c1e (node fetch)``
  (:func:`describe_reuse`), ``child run …``, ``item 3 of NODE``;
- its error (:func:`step_error`);
- durations, one style everywhere (:func:`duration`, :func:`step_took`:
  :func:`~cyclone_flow.durations.format_span`, ``850 ms``, ``12.3 s``, ``4 min 05 s``,
  ``2 h 03 min``), instants (:func:`instant`, ISO 8601 to the second) and times from now
  (:func:`relative`: ``4 min 05 s ago``, ``in 12.3 s``);
- another run named in a line or a link (:func:`short_id`);
- why a step waits (:func:`wait_text`, :func:`wait_line`; the reasons themselves are
  :func:`cyclone_flow.explain.explain`'s);
- a run's unique key, sequence and schedule (:func:`queue_info_lines`);
- what changed between two versions of a flow (:func:`flow_change_lines`, the lines of
  :func:`cyclone_flow.flowfile.compare.describe_change`: ``flows diff`` prints them, the
  dashboard's diff page lists them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cyclone_flow.db.rows import QueueInfo, Step
from cyclone_flow.durations import format_span
from cyclone_flow.explain import Waiting
from cyclone_flow.flowfile.compare import FlowChange, describe_change

__all__ = [
    "NO_ATTEMPT",
    "SHORT_RUN_ID",
    "DetailPart",
    "describe_attempt",
    "describe_reuse",
    "describe_skip",
    "detail_parts",
    "duration",
    "flow_change_lines",
    "instant",
    "queue_info_lines",
    "relative",
    "short_id",
    "state_word",
    "step_detail",
    "step_error",
    "step_took",
    "wait_line",
    "wait_text",
]

SHORT_RUN_ID = 8
"""Characters of a run id shown where a page or a line names another run (the dashboard's
links, ``reused from run 3f2a9c1e``)."""

NO_ATTEMPT = "–"
"""The attempt shown for a step that was never claimed (a pending, skipped, reused or
cancelled step, a node the engine starts): it had no attempt."""


def state_word(state: str) -> str:
    """A run's or step's state as shown: its SQL label (``running``, ``completed``...)."""
    return str(state)


def short_id(run_id: str) -> str:
    """A run id as shown where a page or a line names a run: its first
    :data:`SHORT_RUN_ID` characters (``3f2a9c1e``)."""
    return run_id[:SHORT_RUN_ID]


def describe_skip(reason: Mapping[str, Any]) -> str:
    """Why a step was skipped, from its ``skip_reason``: ``skipped: when TEXT was false
    (REF = VALUE, ...)`` or ``skipped: upstream NODE was skipped``."""
    if "upstream" in reason:
        return f"skipped: upstream {reason['upstream']} was skipped"
    values = reason.get("values")
    pairs = values.items() if isinstance(values, dict) else ()
    shown = ", ".join(f"{k} = {json.dumps(v, ensure_ascii=False)}" for k, v in pairs)
    return f"skipped: when {reason.get('when')!r} was false" + (f" ({shown})" if shown else "")


def describe_reuse(rerun_of: str | None, node: str, item_index: int | None = None) -> str:
    """Where a rerun's reused step took its result from: ``reused from run 3f2a9c1e (node
    fetch)`` (``, item 3`` for a fan-out item). ``rerun_of`` is the run the step's run
    reruns: the source step is always that run's step of the same node (and item); None
    (not a rerun) gives ``reused``."""
    if rerun_of is None:
        return "reused"
    item = f", item {item_index}" if item_index is not None else ""
    return f"reused from run {short_id(rerun_of)} (node {node}{item})"


def describe_attempt(attempt: int, max_attempts: int, lease_generation: int) -> str:
    """A step's attempt for a table: ``2/3``, or :data:`NO_ATTEMPT` for a step that was
    never claimed (``lease_generation`` 0: only a claim raises it), whose stored
    ``attempt`` 1 is only the number its first attempt would get."""
    return f"{attempt}/{max_attempts}" if lease_generation > 0 else NO_ATTEMPT


def instant(at: datetime | None) -> str:
    """An instant in a line of text: ISO 8601 to the second (``2026-12-03T14:05:00+00:00``);
    "" for None."""
    return at.isoformat(timespec="seconds") if at is not None else ""


def duration(start: datetime | None, end: datetime | None) -> str:
    """``end - start`` in the one duration style (``850 ms``, ``12.3 s``, ``4 min 05 s``,
    ``2 h 03 min``, ``3 d 04 h``: :func:`~cyclone_flow.durations.format_span`); "" when
    either is missing."""
    if start is None or end is None:
        return ""
    return format_span((end - start).total_seconds())


def relative(when: datetime | None, now: datetime) -> str:
    """``when`` as seen from ``now`` in the one duration style: ``4 min 05 s ago`` (past),
    ``in 4 min 05 s`` (future; :func:`~cyclone_flow.durations.format_span`); "" for None."""
    if when is None:
        return ""
    seconds = (now - when).total_seconds()
    span = format_span(abs(seconds))
    return f"in {span}" if seconds < 0 else f"{span} ago"


def step_took(step: Step, now: datetime) -> str:
    """How long ``step`` ran (``started_at`` to ``finished_at``, or to ``now`` while it
    runs), as :func:`duration`; "" when it never started or stopped without finishing."""
    if step.started_at is None:
        return ""
    return duration(step.started_at, step.finished_at or (now if step.state == "running" else None))


@dataclass(frozen=True)
class DetailPart:
    """One part of a step's detail line: its ``kind`` (``skip``, ``reuse``, ``item``,
    ``items``, ``child``, ``signal``: what a template may mark up, e.g. link a child run)
    and its ``text``."""

    kind: str
    text: str


def detail_parts(
    step: Step, progress: Mapping[str, Mapping[str, int]], rerun_of: str | None = None
) -> list[DetailPart]:
    """The parts of :func:`step_detail` (a skipped and reused step has two; an action
    none)."""
    reused = None
    if step.reused_from is not None:
        reused = DetailPart("reuse", describe_reuse(rerun_of, step.node, step.item_index))
    if step.state == "skipped" and step.skip_reason is not None:
        skipped = DetailPart("skip", describe_skip(step.skip_reason))
        return [skipped, reused] if reused else [skipped]
    if reused is not None:
        return [reused]
    if step.parent_node is not None:
        return [DetailPart("item", f"item {step.item_index} of {step.parent_node}")]
    if step.type == "fan_out":
        if step.items_total is None:
            return [DetailPart("items", "items: not started")]
        counts = progress.get(step.node, {})
        text = f"items {step.items_done or 0}/{step.items_total} done"
        for state in ("running", "available", "discarded", "cancelled"):
            if counts.get(state):
                text += f", {counts[state]} {state}"
        return [DetailPart("items", text)]
    if step.type == "child":
        if step.child_run_id:
            return [DetailPart("child", f"child run {step.child_run_id}")]
        return [DetailPart("child", "child run: not started")]
    if step.type == "wait_signal":
        if step.state == "waiting":
            until = f" until {instant(step.wait_until)}" if step.wait_until else ""
            return [DetailPart("signal", f"awaits signal {step.signal!r}{until}")]
        return [DetailPart("signal", f"signal {step.signal!r}")]
    return []


def step_detail(
    step: Step, progress: Mapping[str, Mapping[str, int]], rerun_of: str | None = None
) -> str:
    """One line about a step's node type: ``items 42/100 done, 8 running`` for a fan-out
    node (``progress``: node -> item state -> count), ``child run ID`` for a child node,
    ``awaits signal 'NAME' until …`` for a waiting wait_signal node, ``item 3 of NODE``
    for a fan-out item, ``skipped: when ... was false (REF = VALUE)`` / ``skipped:
    upstream NODE was skipped`` for a skipped node, ``reused from run 3f2a9c1e (node
    NODE)`` for a step a rerun took over (``rerun_of``: the run the step's run reruns),
    both (``; ``-joined) for a reused skipped step; "" for an action."""
    return "; ".join(part.text for part in detail_parts(step, progress, rerun_of))


def step_error(step: Step) -> str:
    """``[KIND] MESSAGE`` of a step that did not complete; "" otherwise (a completed step
    may keep the error of an earlier attempt: ``--json`` shows them all)."""
    if not step.error or step.state == "completed":
        return ""
    return f"[{step.error_kind}] {step.error}"


def wait_text(why: Waiting) -> str:
    """Why a step waits, as a line says it after ``waiting:`` (a limit's reason says
    ``waiting: …`` itself: said once)."""
    return why.text.removeprefix("waiting: ")


def wait_line(node: str, why: Waiting) -> str:
    """``waiting: NODE: REASON`` (``status``, ``status --watch`` in a pipe)."""
    return f"waiting: {node}: {wait_text(why)}"


def queue_info_lines(info: QueueInfo | None) -> list[str]:
    """A run's unique key, sequence and schedule, one line each (none when unused):
    ``unique key 'K' (held while running)`` / ``(released)``, ``sequence 'S' #3`` (``:
    held until the earlier runs of the sequence complete or are cancelled``), ``scheduled
    tick 2026-12-03T14:00:00+00:00`` / ``triggered from its schedule (no tick)``."""
    if info is None:
        return []
    lines = []
    if info.unique_key is not None:
        states = ", ".join(info.unique_states or ())
        held = f"held while {states}" if info.unique_held else "released"
        lines.append(f"unique key {info.unique_key!r} ({held})")
    if info.sequence_key is not None:
        where = f"sequence {info.sequence_key!r} #{info.sequence_pos}"
        if info.sequence_held:
            where += ": held until the earlier runs of the sequence complete or are cancelled"
        lines.append(where)
    if info.schedule_id is not None:
        if info.scheduled_for is None:
            lines.append("triggered from its schedule (no tick)")
        else:
            lines.append(f"scheduled tick {instant(info.scheduled_for)}")
    return lines


def flow_change_lines(change: FlowChange) -> list[str]:
    """What changed between two versions of a flow, a line per fact (``+ node ship
    (fan_out)``, ``~ node charge: timeout 30s -> 1m``, ``! input_schema: ... (breaking)``;
    none when unchanged): :func:`~cyclone_flow.flowfile.compare.describe_change`'s."""
    return describe_change(change)

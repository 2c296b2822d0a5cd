"""The timeline of a run drawn as SVG on the server: one row per node (its step), a light
bar for the time it waited claimable (``scheduled_at`` to ``started_at``: the queue wait,
or a retry's backoff) and a bar in its state's colour for the time it ran (``started_at``
to ``finished_at``, or to now while it runs), on one time axis from the run's creation to
its end (or now). A fan-out node's bar spans its items; its items have no rows of their
own. At most :data:`MAX_ROWS` rows are drawn (a 2,000-node flow stays one small picture);
the rest are counted below. Every text is escaped (:func:`markupsafe.escape`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

from cyclone_flow.db.rows import Run, Step
from cyclone_flow.durations import format_span

__all__ = ["MAX_ROWS", "TimelineRow", "render_timeline", "timeline_rows"]

MAX_ROWS = 200
"""Most step rows a timeline draws; the others are counted under it."""
LABEL_W = 180
"""Width of the node-name column (px)."""
CHART_W = 640
"""Width of the time axis (px)."""
ROW_H = 20
"""Height of one row (px)."""
AXIS_H = 22
"""Height of the axis labels above the rows (px)."""
NAME_CHARS = 24
"""Characters of a node name shown in its row (the whole name is its tooltip)."""


@dataclass(frozen=True)
class TimelineRow:
    """One node's row: its name, step state, and the instants of its bars (None: not
    reached): ``claimable_at`` (``scheduled_at`` of a step that started or is available),
    ``started_at``, ``finished_at``."""

    node: str
    state: str
    claimable_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None


def timeline_rows(steps: Sequence[Step]) -> list[TimelineRow]:
    """The rows of the run's top-level steps (fan-out items left out), in the order of
    ``steps``. A step that is pending (its needs unfinished) has no bar yet; one that
    waits claimable shows its wait so far."""
    rows = []
    for s in steps:
        if s.parent_node is not None:
            continue
        claimable = s.scheduled_at if s.started_at is not None or s.state == "available" else None
        if claimable is not None and s.started_at is not None and claimable > s.started_at:
            claimable = None  # a retry moved scheduled_at past the attempt shown
        rows.append(TimelineRow(s.node, str(s.state), claimable, s.started_at, s.finished_at))
    return rows


def render_timeline(
    run: Run, rows: Sequence[TimelineRow], now: datetime, href: Callable[[str], str]
) -> Markup:
    """The SVG timeline of ``run`` (see the module docstring): ``now`` (the database's
    clock or the page's) ends the bars of what still runs or waits; each row's name links
    to ``href(node)``. Safe to embed in HTML: every text is escaped."""
    start = run.created_at
    end = run.finished_at or now
    for row in rows:
        for at in (row.claimable_at, row.started_at, row.finished_at):
            if at is not None:
                start, end = min(start, at), max(end, at)
    span = max((end - start).total_seconds(), 1e-3)
    shown = list(rows[:MAX_ROWS])
    height = AXIS_H + len(shown) * ROW_H + (ROW_H if len(rows) > MAX_ROWS else 0) + 4
    width = LABEL_W + CHART_W + 8

    def x(at: datetime) -> float:
        return round(LABEL_W + (at - start).total_seconds() / span * CHART_W, 1)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="the steps over time">'
    ]
    for i in range(5):  # the axis: 0 %, 25 %, ... of the span
        tick = LABEL_W + CHART_W * i / 4
        parts.append(
            f'<line class="tick" x1="{tick}" y1="{AXIS_H - 4}" x2="{tick}" y2="{height}"/>'
            f'<text class="axis" x="{tick}" y="{AXIS_H - 8}" '
            f'text-anchor="{("start", "middle", "middle", "middle", "end")[i]}">'
            f"{escape(format_span(span * i / 4))}</text>"
        )
    for i, row in enumerate(shown):
        y = AXIS_H + i * ROW_H
        name = escape(row.node)
        label = row.node if len(row.node) <= NAME_CHARS else row.node[: NAME_CHARS - 1] + "…"
        state = escape(row.state)
        parts.append(
            f'<g class="row" data-node="{name}" data-state="{state}">'
            f'<a href="{escape(href(row.node))}"><text class="name" x="4" y="{y + 14}">'
            f"{escape(label)}<title>{name}</title></text></a>"
        )
        stop = row.started_at or (now if row.state == "available" else None)
        if row.claimable_at is not None and stop is not None and stop > row.claimable_at:
            left = x(row.claimable_at)
            waited = format_span((stop - row.claimable_at).total_seconds())
            parts.append(
                f'<rect class="wait" x="{left}" y="{y + 5}" width="{max(x(stop) - left, 1)}" '
                f'height="{ROW_H - 10}"><title>{name}: waited claimable '
                f"{escape(waited)}</title></rect>"
            )
        if row.started_at is not None:
            done = row.finished_at or now
            left = x(row.started_at)
            took = format_span((done - row.started_at).total_seconds())
            parts.append(
                f'<rect class="bar state-{state}" x="{left}" y="{y + 3}" '
                f'width="{max(x(done) - left, 2)}" height="{ROW_H - 6}" rx="2">'
                f"<title>{name}: {state}, "
                f"{'ran' if row.finished_at is not None else 'running for'} {escape(took)}"
                "</title></rect>"
            )
        parts.append("</g>")
    if len(rows) > MAX_ROWS:
        parts.append(
            f'<text class="more" x="4" y="{AXIS_H + len(shown) * ROW_H + 14}">'
            f"… and {len(rows) - MAX_ROWS} more nodes (see the steps table)</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))

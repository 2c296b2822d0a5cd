"""A run as shown: :class:`RunView`, read in one snapshot by :func:`read_view`.

``cyclone-flow status`` (text and ``--json``), ``status --watch``, ``graph --run``, ``run
--json``'s final document and the dashboard's run page each take one view
(``Client.run_view``), so one screen never mixes two moments: the run row, its steps, the
item progress of its fan-out nodes, why its waiting steps wait
(:func:`cyclone_flow.explain.explain`), its queue features and, on request, its last log
lines and its definition all come from one read-only REPEATABLE READ transaction, the one
:func:`cyclone_flow.explain.read_snapshot` takes (its reads are not made twice). How a
view is worded is :mod:`cyclone_flow.describe`'s business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cyclone_flow.db import runs, session, step_logs
from cyclone_flow.db.conn import SessionLike
from cyclone_flow.db.rows import QueueInfo, Run, Step, StepLogLine
from cyclone_flow.explain import Waiting, explain, read_snapshot_in

__all__ = ["RunView", "read_view"]


@dataclass(frozen=True)
class RunView:
    """One run as one snapshot saw it.

    ``run`` (its row), ``steps`` (every step in node order; fan-out item steps only when
    read with ``items``), ``progress`` (fan-out node -> step state -> item count, as
    ``Client.count_items``), ``waiting`` (node -> :class:`~cyclone_flow.explain.Waiting`
    for each step neither running nor finished, as ``Client.explain``), ``queue`` (its
    :class:`~cyclone_flow.db.rows.QueueInfo`), ``now`` (the database's clock at the
    snapshot: the end of a running step's duration so far), ``log_tail`` (its last log
    lines, oldest first; empty unless asked for) and ``definition`` (the flow document it
    was submitted with; None unless asked for)."""

    run: Run
    steps: Sequence[Step]
    progress: Mapping[str, Mapping[str, int]]
    waiting: Mapping[str, Waiting]
    queue: QueueInfo
    now: datetime
    log_tail: Sequence[StepLogLine] = ()
    definition: Mapping[str, Any] | None = None

    def step(self, node: str) -> Step | None:
        """The top-level step of ``node``; None when the run has none."""
        return next((s for s in self.steps if s.node == node and s.parent_node is None), None)


def read_view(
    s: SessionLike,
    run_id: str,
    *,
    items: bool = False,
    logs: int = 0,
    definition: bool = False,
    now: datetime | None = None,
) -> RunView | None:
    """Read the view of run ``run_id`` (a normalised UUID) in one read-only REPEATABLE READ
    transaction on ``s`` (``s.conn`` idle: it begins and ends here); None for an unknown
    run. ``items``: the fan-out item steps too; ``logs``: the last ``logs`` log lines
    (0: none); ``definition``: the flow document too; ``now`` pins the clock (tests)."""
    with s.conn.transaction():
        session.session_set_read_snapshot(s)
        snap = read_snapshot_in(s, run_id, items=items, now=now)
        if snap is None:
            return None
        tail = step_logs.step_log_list_tail(s, run_id=run_id, limit=logs) if logs > 0 else []
        document = runs.run_get_definition(s, run_id=run_id) if definition else None
    assert snap.queue_info is not None  # read with the run, in the same snapshot
    return RunView(
        run=snap.run,
        steps=tuple(snap.steps),
        progress=snap.item_states,
        waiting=explain(snap),
        queue=snap.queue_info,
        now=snap.now,
        log_tail=tuple(tail),
        definition=document,
    )

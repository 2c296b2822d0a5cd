"""The plan of a flow: the rows every run of it gets, as stored in
``cyclone_workflows.plan`` and inserted by ``step_insert_plan`` / ``dep_insert_plan``
(DESIGN: compile). Pure: built from the typed :class:`Flow`, no database.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cyclone_flow.flowfile.model import Flow

__all__ = ["flow_plan"]


def flow_plan(flow: Flow, child_ids: Mapping[str, int]) -> dict[str, Any]:
    """The plan of ``flow``: ``{"deadline_s", "nodes": [one mapping per node]}``.

    Each node's ``queue_own`` / ``priority_own`` say that the node sets its own in the
    file (a submission's ``queue``/``priority`` then do not replace it: Queues and
    Priority); durations are seconds; ``when`` (the condition text) and ``on_dep_skip``
    (``run``) are there only when the node sets them. ``child_ids`` maps each child node
    to the id of its stored child definition. Raises ValueError when a child node has none.
    """
    nodes = []
    for n in flow.nodes.values():
        if n.type == "child" and n.name not in child_ids:
            raise ValueError(
                f"flow {flow.name!r}: child node {n.name!r} has no loaded child flow "
                "(load flows from files with load_flow, which loads child flows too)"
            )
        nodes.append(
            {
                "node": n.name,
                "type": n.type,
                "call": n.call,
                "needs": list(n.needs),
                "queue": n.queue,
                "queue_own": n.queue_set,
                "priority": n.priority,
                "priority_own": n.priority_set,
                "max_attempts": n.retry.max_attempts,
                "backoff": {
                    "initial_s": n.retry.backoff.initial_s,
                    "max_s": n.retry.backoff.max_s,
                    "multiplier": n.retry.backoff.multiplier,
                    "jitter": n.retry.backoff.jitter,
                },
                "on_dep_failure": n.on_dep_failure,
                "timeout_s": n.timeout_s,
                "input": n.input,
                "over": n.options.get("over"),
                "max_parallel": n.options.get("max_parallel"),
                "signal": n.options.get("signal"),
                "max_wait_s": n.max_wait_s,
                "child_workflow_id": child_ids.get(n.name),
            }
        )
        # only when set: the plan of a flow that uses neither stays as it was
        if n.when is not None:
            nodes[-1]["when"] = n.when
        if n.on_dep_skip != "skip":
            nodes[-1]["on_dep_skip"] = n.on_dep_skip
    return {"deadline_s": flow.deadline_s, "nodes": nodes}

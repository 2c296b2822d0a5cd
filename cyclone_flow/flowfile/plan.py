"""The plan of a flow: the rows every run of it gets, as stored in
``cyclone_workflows.plan`` and inserted by ``step_insert_plan`` / ``dep_insert_plan``
(DESIGN: compile). Pure: built from the typed :class:`Flow`, no database.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cyclone_flow.flowfile.model import Flow, Limit

__all__ = ["flow_plan"]


def flow_plan(flow: Flow, child_ids: Mapping[str, int]) -> dict[str, Any]:
    """The plan of ``flow``: ``{"deadline_s", "nodes": [one mapping per node]}``.

    Each node's ``queue_own`` / ``priority_own`` say that the node sets its own in the
    file (a submission's ``queue``/``priority`` then do not replace it: Queues and
    Priority); durations are seconds; ``when`` (the condition text), ``on_dep_skip``
    (``run``) and ``import_wait_s`` are there only when the node sets them. ``child_ids``
    maps each child node to the id of its stored child definition. Raises ValueError when
    a child node has none.
    """
    nodes = []
    for n in flow.nodes.values():
        if n.type == "child" and n.name not in child_ids:
            raise ValueError(
                f"flow {flow.name!r}: child node {n.name!r} has no loaded child flow "
                "(load flows from files with load_flow, which loads child flows too)"
            )
        row: dict[str, Any] = {
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
        # only a node with limits has the keys (step_insert_plan renders its step's keys)
        if n.concurrency is not None:
            row["concurrency"] = _limit_row(n.concurrency)
        if n.rate_limit is not None:
            row["rate_limit"] = _limit_row(n.rate_limit)
        # only when set: the plan of a flow that uses neither stays as it was
        if n.when is not None:
            row["when"] = n.when
        if n.on_dep_skip != "skip":
            row["on_dep_skip"] = n.on_dep_skip
        if n.import_wait_s is not None:  # read by step_give_back_if_leased (600 s if not)
            row["import_wait_s"] = n.import_wait_s
        nodes.append(row)
    return {"deadline_s": flow.deadline_s, "nodes": nodes}


def _limit_row(limit: Limit) -> dict[str, Any]:
    """A limit as the plan stores it: ``group``, ``limit``, ``per_s`` (rate limits) and
    the key's ``path`` in the run input (or, with ``node``, in that ancestor's output) or
    its literal ``value`` (none of them: one key, the group)."""
    row: dict[str, Any] = {"group": limit.group, "limit": limit.limit}
    if limit.per_s is not None:
        row["per_s"] = limit.per_s
    if limit.key_node is not None:
        row["node"] = limit.key_node
    if limit.key_path is not None:
        row["path"] = list(limit.key_path)
    elif limit.key_value is not None:
        row["value"] = limit.key_value
    return row

"""The statements of ``sql/steps.sql`` (table ``cyclone_steps``), one typed function each.

Each runs in the caller's transaction on ``s.conn`` and decides nothing; a guarded
compare-and-swap that changed no row returns None or False (stale), never raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from cyclone_flow.db.conn import (
    Pending,
    SessionLike,
    every,
    execute,
    execute_rows,
    nothing,
    one,
)
from cyclone_flow.db.rows import (
    ClaimedStep,
    CompletedLease,
    CompletedStep,
    ConditionInputs,
    DecidedNode,
    DisownedStep,
    ExpiredNode,
    ExpiredWait,
    FailedAttempt,
    InsertedStep,
    ItemCounts,
    ItemsDone,
    LeasedStep,
    LimitedClaim,
    ListShape,
    NodeInfo,
    NodeOutput,
    NodeState,
    QueueStats,
    QueueThroughput,
    ReclaimedStep,
    ReleasedStep,
    RerunStep,
    RescuedStep,
    ResetStep,
    ReusedStep,
    SkippedStep,
    Step,
    StepOutput,
    rows_of,
)
from cyclone_flow.states import StepState

_CLAIMED = rows_of(ClaimedStep, columns={"run_input": "run_input_text"})
_LIMITED = rows_of(LimitedClaim, columns={"run_input": "run_input_text"})
_STEP = rows_of(Step, convert={"state": StepState})
_QUEUE_STATS = rows_of(QueueStats)
_THROUGHPUT = rows_of(QueueThroughput)
_INSERTED = rows_of(InsertedStep, convert={"state": StepState})
_COMPLETED = rows_of(CompletedStep)
_COMPLETED_LEASE = rows_of(CompletedLease)
_RELEASED = rows_of(ReleasedStep)
_DISOWNED = rows_of(DisownedStep)
_FAILED = rows_of(FailedAttempt, convert={"state": StepState})
_RESCUED = rows_of(RescuedStep)
_LEASED = rows_of(LeasedStep)
_OUTPUT = rows_of(StepOutput, convert={"state": StepState})
_SHOWN_OUTPUT = rows_of(NodeOutput, convert={"state": StepState})
_RESET = rows_of(ResetStep)
_NODE_STATE = rows_of(NodeState, convert={"state": StepState})
_NODE_INFO = rows_of(NodeInfo)
_LIST_SHAPE = rows_of(ListShape, columns={"jsonb_typeof": "kind", "case": "length"})
_ITEM_COUNTS = rows_of(ItemCounts)
_ITEMS_DONE = rows_of(ItemsDone, columns={"case": "queue"})
_DECIDED = rows_of(DecidedNode, convert={"state": StepState})
_EXPIRED_WAIT = rows_of(ExpiredWait)
_EXPIRED_NODE = rows_of(ExpiredNode)
_CONDITION_INPUTS = rows_of(ConditionInputs)
_SKIPPED = rows_of(SkippedStep)
_RERUN_STEP = rows_of(RerunStep, convert={"state": StepState})
_REUSED = rows_of(ReusedStep, convert={"state": StepState})


def _firsts(cursor: psycopg.Cursor[Any]) -> list[str]:
    return [r[0] for r in cursor.fetchall()]


# -- insert --------------------------------------------------------------------------------


def step_insert_plan(
    s: SessionLike,
    *,
    run_id: str,
    root_run_id: str | None,
    workflow_id: int,
    queue: str | None,
    priority: int | None,
    hold: bool,
    run_at: datetime | None,
    delay_us: int | None,
    traceparent: str | None = None,
) -> list[InsertedStep]:
    """Insert one step per node of a new run from its definition's plan (each with the
    run's trace context ``traceparent``, None: none)."""
    params = {
        "run_id": run_id,
        "root_run_id": root_run_id,
        "workflow_id": workflow_id,
        "queue": queue,
        "priority": priority,
        "hold": hold,
        "run_at": run_at,
        "delay_us": delay_us,
        "traceparent": traceparent,
    }
    return execute_rows(s, "step_insert_plan", params, _INSERTED).fetchall()


def send_step_insert_plan_many(
    s: SessionLike,
    *,
    workflow_id: int,
    run_ids: Sequence[str],
    queues: Sequence[str | None],
    priorities: Sequence[int | None],
    run_ats: Sequence[datetime | None],
    delay_us: Sequence[int | None],
    traceparent: str | None = None,
) -> Pending[None]:
    """Send ``step_insert_plan_many``: the steps of the new runs ``run_ids`` of
    definition ``workflow_id`` (per run: its queue / priority override and start, None:
    none / now; one trace context ``traceparent`` for all, None: none)."""
    params = {
        "workflow_id": workflow_id,
        "run_ids": run_ids,
        "queues": queues,
        "priorities": priorities,
        "run_ats": run_ats,
        "delay_us": delay_us,
        "traceparent": traceparent,
    }
    return Pending(execute(s, "step_insert_plan_many", params), nothing)


def step_insert_plan_many(
    s: SessionLike,
    *,
    workflow_id: int,
    run_ids: Sequence[str],
    queues: Sequence[str | None],
    priorities: Sequence[int | None],
    run_ats: Sequence[datetime | None],
    delay_us: Sequence[int | None],
    traceparent: str | None = None,
) -> None:
    """Insert the steps of a chunk of new runs (see :func:`send_step_insert_plan_many`)."""
    send_step_insert_plan_many(
        s,
        workflow_id=workflow_id,
        run_ids=run_ids,
        queues=queues,
        priorities=priorities,
        run_ats=run_ats,
        delay_us=delay_us,
        traceparent=traceparent,
    ).result()


# -- claim and leases ------------------------------------------------------------------------


def step_claim_if_available(
    s: SessionLike, *, queue: str, limit: int, owner: str, ttl_us: int
) -> list[ClaimedStep]:
    """available -> running for up to ``limit`` steps of ``queue`` (SKIP LOCKED, then the
    CAS that takes the lease for ``ttl_us`` microseconds)."""
    params = {"queue": queue, "limit": limit, "owner": owner, "ttl_us": ttl_us}
    return execute_rows(s, "step_claim_if_available", params, _CLAIMED).fetchall()


def step_claim_other_calls_if_available(
    s: SessionLike, *, queue: str, limit: int, owner: str, ttl_us: int, skip_calls: Sequence[str]
) -> list[ClaimedStep]:
    """:func:`step_claim_if_available` without the steps whose call is in ``skip_calls``
    (those this worker gave back lately: it cannot import them)."""
    params = {
        "queue": queue,
        "limit": limit,
        "owner": owner,
        "ttl_us": ttl_us,
        "skip_calls": list(skip_calls),
    }
    return execute_rows(s, "step_claim_other_calls_if_available", params, _CLAIMED).fetchall()


def step_claim_in_run_if_available(
    s: SessionLike, *, queue: str, limit: int, owner: str, ttl_us: int, run_id: str
) -> list[ClaimedStep]:
    """:func:`step_claim_if_available` restricted to run ``run_id`` and its child runs."""
    params = {"queue": queue, "limit": limit, "owner": owner, "ttl_us": ttl_us, "run_id": run_id}
    return execute_rows(s, "step_claim_in_run_if_available", params, _CLAIMED).fetchall()


def step_count_running_by_concurrency_key(s: SessionLike, *, keys: Sequence[str]) -> dict[str, int]:
    """The running steps (slots held) of each concurrency key in ``keys``; a key with
    none is missing."""
    rows = execute(s, "step_count_running_by_concurrency_key", {"keys": list(keys)}).fetchall()
    return {r[0]: r[1] for r in rows}


def send_step_begin_limited_claim(s: SessionLike) -> Pending[None]:
    """Send the limited claim's settings (generic plans, an asynchronous commit, reads in
    index order, no JIT) and the advisory lock (this schema's) that serializes limited claims,
    each held to the end of the caller's transaction (``step_begin_limited_claim``)."""
    return Pending(execute(s, "step_begin_limited_claim"), nothing)


def send_step_set_limit_keys_if_available(s: SessionLike, *, queue: str) -> Pending[None]:
    """Send the setting of the keys of ``queue``'s available limited steps whose keys
    refer to an upstream output (``limit_plan``), computed from that output."""
    return Pending(execute(s, "step_set_limit_keys_if_available", {"queue": queue}), nothing)


def send_step_claim_limited_if_available(
    s: SessionLike,
    *,
    queue: str,
    limit: int,
    owner: str,
    ttl_us: int,
    cursor: str,
    run_id: str | None,
) -> Pending[list[LimitedClaim]]:
    """Send the claim of up to ``limit`` limited steps of ``queue`` within their keys'
    limits, walking the keys from the first after ``cursor`` (round robin); only of run
    ``run_id`` and its child runs when given. Run it after
    :func:`send_step_begin_limited_claim` in the same transaction."""
    params = {
        "queue": queue,
        "limit": limit,
        "owner": owner,
        "ttl_us": ttl_us,
        "cursor": cursor,
        "run_id": run_id,
    }
    return Pending(execute_rows(s, "step_claim_limited_if_available", params, _LIMITED), every)


def send_step_exists_limited(s: SessionLike, *, queue: str) -> Pending[bool]:
    """Send the check whether ``queue`` has an available limited step (now or later)."""
    return Pending(execute(s, "step_exists_limited", {"queue": queue}), _exists)


def send_step_get_next_rate_token(s: SessionLike, *, queue: str) -> Pending[float | None]:
    """Send the probe for the seconds until a rate key of one of ``queue``'s limited keys'
    heads gets a claim back (None: no head waits on a rate key's log)."""
    return Pending(execute(s, "step_get_next_rate_token", {"queue": queue}), _seconds)


def step_get_next_rate_token(s: SessionLike, *, queue: str) -> float | None:
    """The seconds until a rate key of one of ``queue``'s limited keys' heads gets a claim
    back (see :func:`send_step_get_next_rate_token`)."""
    return send_step_get_next_rate_token(s, queue=queue).result()


def _seconds(cursor: psycopg.Cursor[Any]) -> float | None:
    row = cursor.fetchone()
    return None if row is None or row[0] is None else float(row[0])


def _exists(cursor: psycopg.Cursor[Any]) -> bool:
    row = cursor.fetchone()
    return bool(row and row[0])


def step_begin_limited_claim(s: SessionLike) -> None:
    """Take this schema's limited-claim lock until the end of the caller's transaction."""
    send_step_begin_limited_claim(s).result()


def step_set_limit_keys_if_available(s: SessionLike, *, queue: str) -> None:
    """Set the keys of ``queue``'s available limited steps whose keys refer to an
    upstream output (see :func:`send_step_set_limit_keys_if_available`)."""
    send_step_set_limit_keys_if_available(s, queue=queue).result()


def step_claim_limited_if_available(
    s: SessionLike,
    *,
    queue: str,
    limit: int,
    owner: str,
    ttl_us: int,
    cursor: str,
    run_id: str | None,
) -> list[LimitedClaim]:
    """The limited claim (see :func:`send_step_claim_limited_if_available`), after
    :func:`step_begin_limited_claim` in the caller's transaction."""
    return send_step_claim_limited_if_available(
        s, queue=queue, limit=limit, owner=owner, ttl_us=ttl_us, cursor=cursor, run_id=run_id
    ).result()


def step_exists_limited(s: SessionLike, *, queue: str) -> bool:
    """Whether ``queue`` has an available limited step (now or later)."""
    return send_step_exists_limited(s, queue=queue).result()


def step_extend_lease_if_held_many(
    s: SessionLike, *, ids: Sequence[int], generations: Sequence[int], owner: str, ttl_us: int
) -> set[tuple[int, int]]:
    """Renew the leases ``(ids[i], generations[i])`` of ``owner``; the pairs renewed."""
    params = {"ids": ids, "generations": generations, "owner": owner, "ttl_us": ttl_us}
    return {(r[0], r[1]) for r in execute(s, "step_extend_lease_if_held_many", params).fetchall()}


def step_release_lease_if_held_many(
    s: SessionLike, *, ids: Sequence[int], generations: Sequence[int], owner: str
) -> list[str]:
    """running -> available at once for the leases of ``owner``; the queues of the steps
    given back."""
    params = {"ids": ids, "generations": generations, "owner": owner}
    return _firsts(execute(s, "step_release_lease_if_held_many", params))


def step_give_back_if_leased(
    s: SessionLike,
    *,
    id: int,
    generation: int,
    owner: str,
    reason: str,
    delay_us: int,
) -> tuple[str, datetime] | None:
    """running -> available for a step ``owner`` cannot import or may not run, claimable
    again in ``delay_us`` microseconds, no attempt charged, ``reason`` recorded
    (``step_give_back_if_leased``): ``(queue, import_wait_since)``, or None when stale or
    when the node's ``import_wait`` has passed since the first give-back (then discard it)."""
    params = {
        "id": id,
        "generation": generation,
        "owner": owner,
        "reason": reason,
        "delay_us": delay_us,
    }
    row = execute(s, "step_give_back_if_leased", params).fetchone()
    return None if row is None else (row[0], row[1])


def step_disown_if_owner_gone(s: SessionLike, *, now: datetime | None) -> list[DisownedStep]:
    """Clear ``claim_owner`` of the steps whose owner has no heartbeat row live at ``now``
    (None: the database's clock); rows locked by a transaction are left for the next
    pass. The steps released, with their queue and whether claimable now."""
    return execute_rows(s, "step_disown_if_owner_gone", {"now": now}, _DISOWNED).fetchall()


# -- completion ----------------------------------------------------------------------------


def send_step_complete_if_leased(
    s: SessionLike, *, id: int, owner: str, generation: int, output: str
) -> Pending[CompletedStep | None]:
    """Send ``step_complete_if_leased``; the result is None when stale."""
    params = {"id": id, "owner": owner, "generation": generation, "output": output}
    return Pending(execute_rows(s, "step_complete_if_leased", params, _COMPLETED), one)


def step_complete_if_leased(
    s: SessionLike, *, id: int, owner: str, generation: int, output: str
) -> CompletedStep | None:
    """running -> completed with ``output`` (JSON text) under the claim's lease; None when
    stale."""
    return send_step_complete_if_leased(
        s, id=id, owner=owner, generation=generation, output=output
    ).result()


def send_step_complete_if_leased_many(
    s: SessionLike,
    *,
    ids: Sequence[int],
    generations: Sequence[int],
    outputs: Sequence[str],
    owner: str,
) -> Pending[list[CompletedLease]]:
    """Send ``step_complete_if_leased_many``; the result lists the steps completed (a step
    missing from it is stale)."""
    params = {"ids": ids, "generations": generations, "outputs": outputs, "owner": owner}
    cur = execute_rows(s, "step_complete_if_leased_many", params, _COMPLETED_LEASE)
    return Pending(cur, every)


def step_complete_if_leased_many(
    s: SessionLike,
    *,
    ids: Sequence[int],
    generations: Sequence[int],
    outputs: Sequence[str],
    owner: str,
) -> list[CompletedLease]:
    """running -> completed for a batch, each row under its own lease."""
    return send_step_complete_if_leased_many(
        s, ids=ids, generations=generations, outputs=outputs, owner=owner
    ).result()


def step_complete_if_waiting(s: SessionLike, *, run_id: str, node: str, output: str) -> str | None:
    """waiting -> completed with ``output`` (JSON text); the node's queue, None when
    stale."""
    params = {"run_id": run_id, "node": node, "output": output}
    row = execute(s, "step_complete_if_waiting", params).fetchone()
    return None if row is None else str(row[0])


def step_complete_from_child_if_waiting(
    s: SessionLike, *, run_id: str, node: str, child_run_id: str
) -> DecidedNode | None:
    """The child node waiting for ``child_run_id`` -> completed with its output (or
    discarded: over the output limit); None when the node no longer waits for it."""
    params = {"run_id": run_id, "node": node, "child_run_id": child_run_id}
    return execute_rows(s, "step_complete_from_child_if_waiting", params, _DECIDED).fetchone()


# -- release -------------------------------------------------------------------------------


def step_release_if_ready(s: SessionLike, *, run_id: str) -> list[ReleasedStep]:
    """Release every pending step of ``run_id`` whose dependencies all completed."""
    return execute_rows(s, "step_release_if_ready", {"run_id": run_id}, _RELEASED).fetchall()


def send_step_release_dependents_if_ready(
    s: SessionLike, *, run_ids: Sequence[str], nodes: Sequence[str]
) -> Pending[list[ReleasedStep]]:
    """Send ``step_release_dependents_if_ready`` for the completed ``(run_ids[i], nodes[i])``."""
    params = {"run_ids": run_ids, "nodes": nodes}
    return Pending(execute_rows(s, "step_release_dependents_if_ready", params, _RELEASED), every)


def step_release_dependents_if_ready(
    s: SessionLike, *, run_ids: Sequence[str], nodes: Sequence[str]
) -> list[ReleasedStep]:
    """Release the dependents of completed nodes whose dependencies all completed."""
    return send_step_release_dependents_if_ready(s, run_ids=run_ids, nodes=nodes).result()


# -- failure and cancel --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FailParams:
    """The failed attempt of step ``step_id`` of run ``run_id`` (River's
    ``JobSetStateIfRunningParams``), as every function of the failure path takes it:
    guarded by the claim's lease ``generation`` and ``owner`` (None: the recovery sweep,
    which owns no lease; the generation still guards it); ``error`` (its message),
    ``error_kind`` (an :class:`~cyclone_flow.states.ErrorKind` value) and ``traceback``;
    ``permanent``: discard even while attempts remain; ``timed_out``: only when
    ``started_at + timeout`` has passed. Built once per failure, never validated."""

    step_id: int
    run_id: str
    generation: int
    owner: str | None
    error: str
    error_kind: str
    traceback: str | None = None
    permanent: bool = False
    timed_out: bool = False

    def params(self) -> dict[str, object]:
        """The parameters of the fail statements (``run_id`` is not one: the caller holds
        the run lock)."""
        return {
            "id": self.step_id,
            "generation": self.generation,
            "owner": self.owner,
            "error": self.error,
            "error_kind": str(self.error_kind),
            "traceback": self.traceback,
            "permanent": self.permanent,
            "timed_out": self.timed_out,
        }


def send_step_fail_if_leased(s: SessionLike, failure: FailParams) -> Pending[FailedAttempt | None]:
    """Send ``step_fail_if_leased``; the result is None when stale."""
    return Pending(execute_rows(s, "step_fail_if_leased", failure.params(), _FAILED), one)


def step_fail_if_leased(s: SessionLike, failure: FailParams) -> FailedAttempt | None:
    """A failed attempt (retry after backoff, or discard); None when stale."""
    return send_step_fail_if_leased(s, failure).result()


def send_step_fail_without_backoff_if_leased(
    s: SessionLike, failure: FailParams
) -> Pending[FailedAttempt | None]:
    """Send ``step_fail_without_backoff_if_leased``; the result is None when stale."""
    cur = execute_rows(s, "step_fail_without_backoff_if_leased", failure.params(), _FAILED)
    return Pending(cur, one)


def step_fail_without_backoff_if_leased(
    s: SessionLike, failure: FailParams
) -> FailedAttempt | None:
    """:func:`step_fail_if_leased` without reading the step's backoff (a retry is
    available at once); None when stale."""
    return send_step_fail_without_backoff_if_leased(s, failure).result()


def step_cancel_if_unfinished(s: SessionLike, *, run_id: str, error: str) -> list[str]:
    """Every non-terminal step of ``run_id`` -> cancelled; the nodes cancelled."""
    return _firsts(execute(s, "step_cancel_if_unfinished", {"run_id": run_id, "error": error}))


def step_cancel_nodes_if_unfinished(
    s: SessionLike, *, run_id: str, nodes: Sequence[str], error: str
) -> list[str]:
    """The named non-terminal steps of ``run_id`` -> cancelled; the nodes cancelled."""
    params = {"run_id": run_id, "nodes": nodes, "error": error}
    return _firsts(execute(s, "step_cancel_nodes_if_unfinished", params))


def step_discard_if_waiting(
    s: SessionLike,
    *,
    run_id: str,
    node: str,
    error: str,
    error_kind: str,
    child_run_id: str | None = None,
) -> str | None:
    """waiting -> discarded with ``error`` (only while it waits for ``child_run_id``,
    when given); the node's queue, None when stale."""
    params = {
        "run_id": run_id,
        "node": node,
        "error": error,
        "error_kind": error_kind,
        "child_run_id": child_run_id,
    }
    row = execute(s, "step_discard_if_waiting", params).fetchone()
    return None if row is None else str(row[2])


def step_discard_if_released(
    s: SessionLike, *, run_id: str, node: str, error: str, error_kind: str
) -> str | None:
    """available or waiting (just released) -> discarded with ``error``: its ``when:``
    could not be evaluated. The node's queue, None when stale."""
    params = {"run_id": run_id, "node": node, "error": error, "error_kind": error_kind}
    row = execute(s, "step_discard_if_released", params).fetchone()
    return None if row is None else str(row[0])


def step_skip_if_released(s: SessionLike, *, run_id: str, node: str, reason: str) -> str | None:
    """available or waiting (just released) -> skipped, ``reason`` (JSON text) its
    condition as evaluated. The node's queue, None when stale."""
    params = {"run_id": run_id, "node": node, "reason": reason}
    row = execute(s, "step_skip_if_released", params).fetchone()
    return None if row is None else str(row[0])


def step_skip_dependents_if_pending(
    s: SessionLike, *, run_id: str, nodes: Sequence[str]
) -> list[SkippedStep]:
    """Skip-cascade below the skipped ``nodes``: the pending descendants reached through
    dependents with ``on_dep_skip`` skip -> skipped; each node skipped and its queue."""
    params = {"run_id": run_id, "nodes": list(nodes)}
    return execute_rows(s, "step_skip_dependents_if_pending", params, _SKIPPED).fetchall()


def step_get_condition_inputs(
    s: SessionLike, *, run_id: str, nodes: Sequence[str]
) -> ConditionInputs | None:
    """The run input and the state and output of ``nodes`` (JSON text) for a ``when:``;
    None when the run does not exist."""
    params = {"run_id": run_id, "nodes": list(nodes)}
    return execute_rows(s, "step_get_condition_inputs", params, _CONDITION_INPUTS).fetchone()


def step_list_rerun_source(s: SessionLike, *, run_id: str) -> list[RerunStep]:
    """The top-level steps of ``run_id`` with their state and templates (a rerun's
    source), in creation order."""
    return execute_rows(s, "step_list_rerun_source", {"run_id": run_id}, _RERUN_STEP).fetchall()


def step_reuse_from_run(
    s: SessionLike, *, run_id: str, source: str, nodes: Sequence[str]
) -> list[ReusedStep]:
    """The pending steps of the rerun ``run_id`` take their queue and priority from run
    ``source``, and ``nodes`` its result (completed or skipped, reused_from set); each
    step's node and new state."""
    params = {"run_id": run_id, "source": source, "nodes": list(nodes)}
    return execute_rows(s, "step_reuse_from_run", params, _REUSED).fetchall()


def step_insert_reused_items(
    s: SessionLike, *, run_id: str, source: str, nodes: Sequence[str]
) -> int:
    """Copy the completed items of the fan-out ``nodes`` of run ``source`` into the rerun
    ``run_id``; how many."""
    params = {"run_id": run_id, "source": source, "nodes": list(nodes)}
    return execute(s, "step_insert_reused_items", params).rowcount


def step_reset_if_discarded_or_cancelled(
    s: SessionLike, *, run_id: str, node: str | None
) -> list[ResetStep]:
    """Operator retry: discarded (all, or ``node`` and its items) and cancelled steps ->
    pending; the steps reset."""
    params = {"run_id": run_id, "node": node}
    return execute_rows(s, "step_reset_if_discarded_or_cancelled", params, _RESET).fetchall()


# -- recovery sweep ------------------------------------------------------------------------


def step_rescue_if_lease_expired(
    s: SessionLike, *, max_reclaims: int, batch: int, now: datetime | None = None
) -> list[RescuedStep]:
    """Expired leases (at ``now``, default the database's) back to available (reclaims +
    1); the steps rescued."""
    params = {"max_reclaims": max_reclaims, "batch": batch, "now": now}
    return execute_rows(s, "step_rescue_if_lease_expired", params, _RESCUED).fetchall()


def step_list_timed_out(
    s: SessionLike, *, batch: int, now: datetime | None = None
) -> list[LeasedStep]:
    """Running steps past ``started_at + timeout`` at ``now`` (default the database's)."""
    params = {"batch": batch, "now": now}
    return execute_rows(s, "step_list_timed_out", params, _LEASED).fetchall()


def step_list_reclaim_exhausted(
    s: SessionLike, *, max_reclaims: int, batch: int, now: datetime | None = None
) -> list[LeasedStep]:
    """Leases expired at ``now`` (default the database's) of steps reclaimed
    ``max_reclaims`` times already."""
    params = {"max_reclaims": max_reclaims, "batch": batch, "now": now}
    return execute_rows(s, "step_list_reclaim_exhausted", params, _LEASED).fetchall()


# -- nodes that wait -----------------------------------------------------------------------


def step_get_node_info(s: SessionLike, *, run_id: str, node: str) -> NodeInfo | None:
    """What starting the released node ``node`` needs; None when there is no such step."""
    params = {"run_id": run_id, "node": node}
    return execute_rows(s, "step_get_node_info", params, _NODE_INFO).fetchone()


def step_set_wait_until_if_waiting(s: SessionLike, *, run_id: str, node: str) -> None:
    """A child or wait_signal node starts waiting (its ``wait_until`` is set)."""
    execute(s, "step_set_wait_until_if_waiting", {"run_id": run_id, "node": node})


def step_set_child_run_if_waiting(
    s: SessionLike, *, run_id: str, node: str, child_run_id: str
) -> None:
    """Record the child run a waiting child node started."""
    params = {"run_id": run_id, "node": node, "child_run_id": child_run_id}
    execute(s, "step_set_child_run_if_waiting", params)


def step_list_expired_waits(
    s: SessionLike, *, batch: int, now: datetime | None = None
) -> list[ExpiredWait]:
    """Waiting child and wait_signal nodes past ``wait_until`` at ``now`` (default the
    database's)."""
    params = {"batch": batch, "now": now}
    return execute_rows(s, "step_list_expired_waits", params, _EXPIRED_WAIT).fetchall()


def step_discard_if_wait_expired(
    s: SessionLike, *, run_id: str, node: str, error: str, now: datetime | None = None
) -> ExpiredNode | None:
    """waiting -> discarded with kind ``timeout`` past ``wait_until`` at ``now`` (default
    the database's); None when stale."""
    params = {"run_id": run_id, "node": node, "error": error, "now": now}
    return execute_rows(s, "step_discard_if_wait_expired", params, _EXPIRED_NODE).fetchone()


def step_get_signal_waiter(s: SessionLike, *, run_id: str, name: str) -> str | None:
    """The first waiting wait_signal node of ``run_id`` that awaits ``name``."""
    row = execute(s, "step_get_signal_waiter", {"run_id": run_id, "name": name}).fetchone()
    return None if row is None else str(row[0])


# -- fan-out -------------------------------------------------------------------------------


def step_get_list_shape(
    s: SessionLike,
    *,
    run_id: str,
    node: str,
    literal: str | None,
    from_node: str | None,
    path: list[str],
) -> ListShape | None:
    """The JSON type and length of a fan-out node's list (a literal, a part of the run
    input, or a part of ``from_node``'s output at ``path``)."""
    params = {
        "run_id": run_id,
        "node": node,
        "literal": literal,
        "from_node": from_node,
        "path": path,
    }
    return execute_rows(s, "step_get_list_shape", params, _LIST_SHAPE).fetchone()


def step_insert_items_if_waiting(
    s: SessionLike,
    *,
    run_id: str,
    node: str,
    literal: str | None,
    from_node: str | None,
    path: list[str],
) -> None:
    """One item step per element of the fan-out node's list (see
    :func:`step_get_list_shape`)."""
    params = {
        "run_id": run_id,
        "node": node,
        "literal": literal,
        "from_node": from_node,
        "path": path,
    }
    execute(s, "step_insert_items_if_waiting", params)


def step_set_items_total_if_waiting(
    s: SessionLike, *, run_id: str, node: str, total: int
) -> ItemCounts | None:
    """Record a started fan-out node's item count; its done and total counts."""
    params = {"run_id": run_id, "node": node, "total": total}
    return execute_rows(s, "step_set_items_total_if_waiting", params, _ITEM_COUNTS).fetchone()


def step_release_items_if_room(s: SessionLike, *, run_id: str, node: str) -> list[str]:
    """pending -> available for the next items of a fan-out node; their queues."""
    return _firsts(execute(s, "step_release_items_if_room", {"run_id": run_id, "node": node}))


def step_add_items_done_if_waiting(
    s: SessionLike, *, run_id: str, node: str, n: int
) -> ItemsDone | None:
    """``n`` items of the waiting fan-out node ``node`` completed: count them and release
    the next ones; None when the node no longer waits."""
    params = {"run_id": run_id, "node": node, "n": n}
    return execute_rows(s, "step_add_items_done_if_waiting", params, _ITEMS_DONE).fetchone()


def step_complete_fan_out_if_waiting(
    s: SessionLike, *, run_id: str, node: str
) -> DecidedNode | None:
    """waiting -> completed with the item outputs (or discarded: over the output limit);
    None when stale."""
    params = {"run_id": run_id, "node": node}
    return execute_rows(s, "step_complete_fan_out_if_waiting", params, _DECIDED).fetchone()


def step_cancel_items_if_unfinished(
    s: SessionLike, *, run_id: str, node: str, error: str
) -> list[str]:
    """Every unfinished item of a fan-out node -> cancelled; the items cancelled."""
    params = {"run_id": run_id, "node": node, "error": error}
    return _firsts(execute(s, "step_cancel_items_if_unfinished", params))


def step_count_items(s: SessionLike, *, run_id: str) -> dict[str, dict[str, int]]:
    """Item counts of each started fan-out node of a run: node -> state -> count."""
    out: dict[str, dict[str, int]] = {}
    for node, state, count in execute(s, "step_count_items", {"run_id": run_id}).fetchall():
        out.setdefault(node, {})[state] = int(count)
    return out


# -- reads ---------------------------------------------------------------------------------


def step_get_output(s: SessionLike, *, run_id: str, node: str) -> StepOutput | None:
    """The output of ``(run_id, node)`` as JSON text, with the step's state."""
    params = {"run_id": run_id, "node": node}
    return execute_rows(s, "step_get_output", params, _OUTPUT).fetchone()


def step_get_output_shown(
    s: SessionLike,
    *,
    run_id: str,
    node: str,
    item: int | None = None,
    max_bytes: int | None = None,
) -> NodeOutput | None:
    """The output of top-level node ``node`` of ``run_id`` (with ``item``: of its fan-out
    item ``item``, 0-based) with its state and size; the value left out (``truncated``)
    when its JSON text is over ``max_bytes`` (None: never). None when there is no such
    step (an unknown node, an item not created yet or out of range)."""
    name, parent = (node, None) if item is None else (f"{node}[{item}]", node)
    params = {"run_id": run_id, "node": name, "parent": parent, "max_bytes": max_bytes}
    return execute_rows(s, "step_get_output_shown", params, _SHOWN_OUTPUT).fetchone()


def step_get_state(s: SessionLike, *, run_id: str, node: str) -> NodeState | None:
    """The state of one node of a run (and its fan-out node when it is an item)."""
    params = {"run_id": run_id, "node": node}
    return execute_rows(s, "step_get_state", params, _NODE_STATE).fetchone()


def step_list_signal_names(s: SessionLike, *, run_id: str) -> list[str]:
    """The signal names the wait_signal nodes of run ``run_id`` await, sorted."""
    return _firsts(execute(s, "step_list_signal_names", {"run_id": run_id}))


def step_list(s: SessionLike, *, run_id: str, items: bool) -> list[Step]:
    """Every step of a run in creation order (fan-out items only when ``items``)."""
    return execute_rows(s, "step_list", {"run_id": run_id, "items": items}, _STEP).fetchall()


def step_list_items_page(
    s: SessionLike, *, run_id: str, node: str, start: int, limit: int
) -> list[Step]:
    """Item steps of fan-out node ``node``, from item index ``start``, at most ``limit``."""
    params = {"run_id": run_id, "node": node, "start": start, "limit": limit}
    return execute_rows(s, "step_list_items_page", params, _STEP).fetchall()


def step_list_given_back_calls(
    s: SessionLike, *, queues: Sequence[str], calls: Sequence[str], recent_s: float
) -> dict[tuple[str, str], tuple[str, datetime]]:
    """``(queue, call)`` -> ``(reason, scheduled_at)`` of the latest available step of
    that call and queue given back in the last ``recent_s`` seconds (its
    ``import_wait_reason``); pairs with none are left out."""
    rows = execute(
        s,
        "step_list_given_back_calls",
        {"queues": list(queues), "calls": list(calls), "recent_s": recent_s},
    ).fetchall()
    return {(queue, call): (reason, at) for queue, call, reason, at in rows}


def step_list_discarded(s: SessionLike, *, run_id: str) -> list[str]:
    """The discarded nodes of a run."""
    return _firsts(execute(s, "step_list_discarded", {"run_id": run_id}))


def step_count_active(s: SessionLike, *, queues: Sequence[str]) -> int:
    """Steps of ``queues`` that are available (at any time) or running."""
    row = execute(s, "step_count_active", {"queues": list(queues)}).fetchone()
    return int(row[0]) if row else 0


def step_count_active_other_calls(
    s: SessionLike, *, queues: Sequence[str], skip_calls: Sequence[str]
) -> int:
    """:func:`step_count_active` without the available steps whose call is in
    ``skip_calls`` (the calls a worker gives back: it cannot import them)."""
    row = execute(
        s,
        "step_count_active_other_calls",
        {"queues": list(queues), "skip_calls": list(skip_calls)},
    ).fetchone()
    return int(row[0]) if row else 0


def step_count_by_queue(s: SessionLike) -> list[QueueStats]:
    """Per queue with available or running steps: depth, delayed, running, oldest age."""
    return execute_rows(s, "step_count_by_queue", None, _QUEUE_STATS).fetchall()


def step_count_finished_by_queue(s: SessionLike, *, cap: int, active: int) -> list[QueueThroughput]:
    """Per queue, steps finished in the last minute and hour (at most ``cap`` counted;
    the runs with a claimable step looked at: at most ``active``)."""
    params = {"cap": cap, "active": active}
    return execute_rows(s, "step_count_finished_by_queue", params, _THROUGHPUT).fetchall()


_RECLAIMED = rows_of(ReclaimedStep, convert={"state": StepState})


def step_list_reclaimed(
    s: SessionLike, *, min_reclaims: int, limit: int, head: int = 1000
) -> list[ReclaimedStep]:
    """Unfinished steps reclaimed more than ``min_reclaims`` times, most first: the running
    ones, and the available ones among the first ``head`` of each queue's claim order."""
    params = {"min_reclaims": min_reclaims, "limit": limit, "head": head}
    return execute_rows(s, "step_list_reclaimed", params, _RECLAIMED).fetchall()


def step_count_by_lease_owner(s: SessionLike) -> dict[str, int]:
    """Running steps per lease owner (client id)."""
    return {str(r[0]): int(r[1]) for r in execute(s, "step_count_by_lease_owner", None)}

"""The statements of ``sql/runs.sql`` (table ``cyclone_runs``), one typed function each.

Each runs in the caller's transaction on ``s.conn`` and decides nothing; a guarded
compare-and-swap that changed no row returns None or False (stale), never raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cyclone_flow.db.conn import Pending, SessionLike, every, execute, execute_rows
from cyclone_flow.db.rows import (
    CompletedRun,
    DeadlineFailedRun,
    EndedRun,
    InsertedChild,
    LockedRun,
    QueueInfo,
    RerunSource,
    Run,
    RunLock,
    rows_of,
)
from cyclone_flow.states import RunState

_RUN = rows_of(Run, convert={"state": RunState})
_RUN_LOCK = rows_of(RunLock, convert={"state": RunState})
_LOCKED_RUN = rows_of(LockedRun, convert={"state": RunState})
_COMPLETED_RUN = rows_of(CompletedRun)
_ENDED_RUN = rows_of(EndedRun)
_RERUN_SOURCE = rows_of(RerunSource, convert={"state": RunState})
_DEADLINE_FAILED = rows_of(DeadlineFailedRun)
_INSERTED_CHILD = rows_of(InsertedChild)
_QUEUE_INFO = rows_of(QueueInfo)


def _own_state(locks: list[RunLock]) -> RunState | None:
    return next((lock.state for lock in locks if lock.own), None)


# -- locks ---------------------------------------------------------------------------------


def send_run_lock(s: SessionLike, *, run_id: str) -> Pending[RunState | None]:
    """Send ``run_lock``: the run row lock (for a child run: its top run's first) for the
    rest of the transaction; the result is the run's state (None: no such run)."""
    cur = execute_rows(s, "run_lock", {"run_id": run_id}, _RUN_LOCK)
    return Pending(cur, lambda c: _own_state(c.fetchall()))


def run_lock(s: SessionLike, *, run_id: str) -> RunState | None:
    """Take the run row lock (see :func:`send_run_lock`); the run's state, None when the
    run does not exist."""
    return send_run_lock(s, run_id=run_id).result()


def send_run_lock_many(s: SessionLike, *, run_ids: Sequence[str]) -> Pending[list[LockedRun]]:
    """Send ``run_lock_many``: the run row locks of a batch in one global order."""
    return Pending(execute_rows(s, "run_lock_many", {"run_ids": run_ids}, _LOCKED_RUN), every)


def run_lock_many(s: SessionLike, *, run_ids: Sequence[str]) -> list[LockedRun]:
    """Lock the runs ``run_ids`` (see :func:`send_run_lock_many`)."""
    return send_run_lock_many(s, run_ids=run_ids).result()


# -- transitions ---------------------------------------------------------------------------


def send_run_complete_if_done(
    s: SessionLike, *, run_ids: Sequence[str]
) -> Pending[list[CompletedRun]]:
    """Send ``run_complete_if_done`` for ``run_ids``; the result is the runs it completed."""
    cur = execute_rows(s, "run_complete_if_done", {"run_ids": run_ids}, _COMPLETED_RUN)
    return Pending(cur, every)


def run_complete_if_done(s: SessionLike, *, run_ids: Sequence[str]) -> list[CompletedRun]:
    """running -> completed for each run of ``run_ids`` with no non-terminal step left."""
    return send_run_complete_if_done(s, run_ids=run_ids).result()


def run_fail_if_running(
    s: SessionLike, *, run_id: str, error: str, error_kind: str
) -> EndedRun | None:
    """running -> failed, once; None when the run is terminal already."""
    params = {"run_id": run_id, "error": error, "error_kind": error_kind}
    return execute_rows(s, "run_fail_if_running", params, _ENDED_RUN).fetchone()


def run_cancel_if_running(s: SessionLike, *, run_id: str, error: str) -> EndedRun | None:
    """running -> cancelled (operator cancel); None when the run is terminal already."""
    params = {"run_id": run_id, "error": error}
    return execute_rows(s, "run_cancel_if_running", params, _ENDED_RUN).fetchone()


def run_cancel_if_failed_in_sequence(s: SessionLike, *, run_id: str, error: str) -> bool:
    """failed -> cancelled for a run of a sequence; False for any other run."""
    params = {"run_id": run_id, "error": error}
    return execute(s, "run_cancel_if_failed_in_sequence", params).fetchone() is not None


def run_fail_if_past_deadline(
    s: SessionLike, *, run_id: str, now: datetime | None = None
) -> DeadlineFailedRun | None:
    """running -> failed with kind ``deadline`` when past it at ``now`` (default the
    database's); None when stale."""
    params = {"run_id": run_id, "now": now}
    return execute_rows(s, "run_fail_if_past_deadline", params, _DEADLINE_FAILED).fetchone()


def run_cancel_tree_if_running(
    s: SessionLike, *, run_id: str, with_self: bool, error: str
) -> list[str]:
    """Cancel the running descendants of ``run_id`` (and itself when ``with_self``) with
    their unfinished steps; the ids of the runs cancelled."""
    params = {"run_id": run_id, "with_self": with_self, "error": error}
    return [str(r[0]) for r in execute(s, "run_cancel_tree_if_running", params).fetchall()]


def run_reopen_if_terminal(s: SessionLike, *, run_id: str) -> bool:
    """failed | cancelled | completed -> running (operator retry); False when running."""
    return execute(s, "run_reopen_if_terminal", {"run_id": run_id}).fetchone() is not None


def run_release_next_in_sequence_if_held(s: SessionLike, *, key: str) -> list[str]:
    """Unhold the head run of sequence ``key`` when it is held; the ids released."""
    return [str(r[0]) for r in execute(s, "run_release_next_in_sequence_if_held", {"key": key})]


# -- inserts -------------------------------------------------------------------------------


def run_insert(
    s: SessionLike,
    *,
    workflow_id: int,
    input: str,
    unique_key: str | None,
    unique_window_s: float | None,
    unique_states: list[str] | None,
    sequence_key: str | None,
    sequence_pos: int | None,
    sequence_held: bool,
    schedule_id: int | None,
    scheduled_for: datetime | None,
    output_limit: int | None,
    max_signal_wait_s: float | None,
    run_at: datetime | None,
    delay_us: int | None,
    owner: str | None = None,
    traceparent: str | None = None,
    revision: int | None = None,
) -> str | None:
    """Insert a new top run (``owner``: the client id of the ``cyclone-flow run`` process
    of an isolated run, None: shared; ``traceparent``: the submitter's W3C trace context,
    None: none; ``revision``: the deployed revision submitted by name, None: from a file);
    its id, or None when a unique key conflicted (or the definition ``workflow_id`` is not
    stored)."""
    params = {
        "workflow_id": workflow_id,
        "input": input,
        "unique_key": unique_key,
        "unique_window_s": unique_window_s,
        "unique_states": unique_states,
        "sequence_key": sequence_key,
        "sequence_pos": sequence_pos,
        "sequence_held": sequence_held,
        "schedule_id": schedule_id,
        "scheduled_for": scheduled_for,
        "output_limit": output_limit,
        "max_signal_wait_s": max_signal_wait_s,
        "run_at": run_at,
        "delay_us": delay_us,
        "owner": owner,
        "traceparent": traceparent,
        "revision": revision,
    }
    row = execute(s, "run_insert", params).fetchone()
    return None if row is None else str(row[0])


def _first_id(cursor: Any) -> str | None:
    row = cursor.fetchone()
    return None if row is None else str(row[0])


def run_insert_with_plan(
    s: SessionLike,
    *,
    id: str,
    workflow_id: int,
    input: str,
    queue: str | None,
    priority: int | None,
    run_at: datetime | None,
    delay_us: int | None,
    output_limit: int | None,
    max_signal_wait_s: float | None,
    traceparent: str | None = None,
) -> str | None:
    """Insert run ``id`` of definition ``workflow_id`` with its steps and deps in one
    statement (``queue`` / ``priority``: the override of the nodes that set none; the run
    starts at ``run_at`` or ``delay_us`` microseconds from now, both None: now; run and
    steps carry the trace context ``traceparent``); its id, or None (nothing written) when
    the definition is not stored."""
    params = {
        "id": id,
        "workflow_id": workflow_id,
        "input": input,
        "queue": queue,
        "priority": priority,
        "run_at": run_at,
        "delay_us": delay_us,
        "output_limit": output_limit,
        "max_signal_wait_s": max_signal_wait_s,
        "traceparent": traceparent,
    }
    return _first_id(execute(s, "run_insert_with_plan", params))


def send_run_insert_many(
    s: SessionLike,
    *,
    workflow_id: int,
    ids: Sequence[str],
    inputs: Sequence[str],
    run_ats: Sequence[datetime | None],
    delay_us: Sequence[int | None],
    output_limit: int | None,
    max_signal_wait_s: float | None,
    traceparent: str | None = None,
) -> Pending[int]:
    """Send ``run_insert_many``: the runs ``ids`` (one input JSON text, ``run_at`` and
    ``delay_us`` each, in order) of definition ``workflow_id``; the result is how many
    were inserted (0: the definition is not stored)."""
    params = {
        "workflow_id": workflow_id,
        "ids": ids,
        "inputs": inputs,
        "run_ats": run_ats,
        "delay_us": delay_us,
        "output_limit": output_limit,
        "max_signal_wait_s": max_signal_wait_s,
        "traceparent": traceparent,
    }
    return Pending(execute(s, "run_insert_many", params), _rowcount)


def run_insert_many(
    s: SessionLike,
    *,
    workflow_id: int,
    ids: Sequence[str],
    inputs: Sequence[str],
    run_ats: Sequence[datetime | None],
    delay_us: Sequence[int | None],
    output_limit: int | None,
    max_signal_wait_s: float | None,
    traceparent: str | None = None,
) -> int:
    """Insert a chunk of new top runs (see :func:`send_run_insert_many`); how many."""
    return send_run_insert_many(
        s,
        workflow_id=workflow_id,
        ids=ids,
        inputs=inputs,
        run_ats=run_ats,
        delay_us=delay_us,
        output_limit=output_limit,
        max_signal_wait_s=max_signal_wait_s,
        traceparent=traceparent,
    ).result()


def _rowcount(cursor: Any) -> int:
    return int(cursor.rowcount)


def run_insert_child(
    s: SessionLike,
    *,
    workflow_id: int,
    input: str,
    parent_run_id: str,
    node: str,
    not_before: datetime | None,
) -> InsertedChild | None:
    """Insert the child run of a released child node; None when the definition or the
    parent run is gone."""
    params = {
        "workflow_id": workflow_id,
        "input": input,
        "parent_run_id": parent_run_id,
        "node": node,
        "not_before": not_before,
    }
    return execute_rows(s, "run_insert_child", params, _INSERTED_CHILD).fetchone()


def run_insert_rerun(s: SessionLike, *, rerun_of: str, input: str) -> str | None:
    """Insert the rerun of ``rerun_of`` with ``input`` (JSON text); its id, None when the
    original run is gone."""
    row = execute(s, "run_insert_rerun", {"rerun_of": rerun_of, "input": input}).fetchone()
    return None if row is None else str(row[0])


# -- reads ---------------------------------------------------------------------------------


def run_get_rerun_source(s: SessionLike, *, run_id: str) -> RerunSource | None:
    """What a rerun needs of run ``run_id``; None when there is no such run."""
    return execute_rows(s, "run_get_rerun_source", {"run_id": run_id}, _RERUN_SOURCE).fetchone()


def run_get(s: SessionLike, *, run_id: str) -> Run | None:
    """One run, None when there is none."""
    return execute_rows(s, "run_get", {"run_id": run_id}, _RUN).fetchone()


def run_list(
    s: SessionLike,
    *,
    flow: str | None,
    state: str | None,
    limit: int,
    revision: int | None = None,
) -> list[Run]:
    """The most recent runs, newest first (optionally of one flow, state and/or deployed
    revision)."""
    params = {"flow": flow, "state": state, "limit": limit, "revision": revision}
    return execute_rows(s, "run_list", params, _RUN).fetchall()


def run_list_page(
    s: SessionLike,
    *,
    limit: int,
    flow: str | None = None,
    state: str | None = None,
    unique_key: str | None = None,
    queue: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    after: tuple[datetime, str] | None = None,
    revision: int | None = None,
) -> list[Run]:
    """Up to ``limit`` runs, newest first, after the keyset ``after`` (``(created_at,
    id)`` of the last run of the previous page), filtered by the arguments given
    (``revision``: a deployed revision of ``flow``)."""
    params = {
        "limit": limit,
        "flow": flow,
        "state": state,
        "revision": revision,
        "unique_key": unique_key,
        "queue": queue,
        "since": since,
        "until": until,
        "after_at": after[0] if after else None,
        "after_id": after[1] if after else None,
    }
    return execute_rows(s, "run_list_page", params, _RUN).fetchall()


def run_count_states_since(s: SessionLike, *, age_s: float, cap: int) -> dict[str, int]:
    """Runs created in the last ``age_s`` seconds by state, at most ``cap`` counted."""
    params = {"age_s": age_s, "cap": cap}
    return {str(r[0]): int(r[1]) for r in execute(s, "run_count_states_since", params)}


def run_get_input(s: SessionLike, *, run_id: str) -> str | None:
    """The input of a run as JSON text; None when there is no such run."""
    row = execute(s, "run_get_input", {"run_id": run_id}).fetchone()
    return None if row is None else str(row[0])


def run_get_definition(s: SessionLike, *, run_id: str) -> dict[str, Any] | None:
    """The flow document a run was submitted with; None when there is no such run."""
    row = execute(s, "run_get_definition", {"run_id": run_id}).fetchone()
    return None if row is None else dict(row[0])


def run_get_queue_info(s: SessionLike, *, run_id: str) -> QueueInfo | None:
    """The unique/sequence/schedule columns of a run; None when unknown."""
    return execute_rows(s, "run_get_queue_info", {"run_id": run_id}, _QUEUE_INFO).fetchone()


def run_get_sequence_holder(s: SessionLike, *, run_id: str) -> str | None:
    """The first open run (neither completed nor cancelled) of run ``run_id``'s sequence
    before it: what a held run waits for; None when there is none."""
    row = execute(s, "run_get_sequence_holder", {"run_id": run_id}).fetchone()
    return None if row is None else str(row[0])


def run_get_sequence(s: SessionLike, *, run_id: str) -> str | None:
    """The sequence key of a run; None when it is in none (or does not exist)."""
    row = execute(s, "run_get_sequence", {"run_id": run_id}).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def run_get_unique_holder(
    s: SessionLike, *, unique_key: str | None, unique_window_s: float | None
) -> str | None:
    """The run holding ``unique_key`` now; None when none does."""
    params = {"unique_key": unique_key, "unique_window_s": unique_window_s}
    row = execute(s, "run_get_unique_holder", params).fetchone()
    return None if row is None else str(row[0])


def run_disown_if_owner_gone(s: SessionLike, *, now: datetime | None) -> list[str]:
    """Clear the owner of the top runs whose owner has no heartbeat row live at ``now``
    (None: the database's clock); locked runs are left for the next pass. Their ids."""
    return [str(r[0]) for r in execute(s, "run_disown_if_owner_gone", {"now": now})]


def run_exists_open_in_sequence(s: SessionLike, *, key: str) -> bool:
    """Whether a run of sequence ``key`` is neither completed nor cancelled."""
    row = execute(s, "run_exists_open_in_sequence", {"key": key}).fetchone()
    return bool(row and row[0])


def run_list_ids_in_range(s: SessionLike, *, low: str, high: str, limit: int) -> list[str]:
    """Ids of the runs from uuid ``low`` to uuid ``high`` (both included), lowest first,
    at most ``limit``."""
    params = {"low": low, "high": high, "limit": limit}
    return [str(r[0]) for r in execute(s, "run_list_ids_in_range", params).fetchall()]


def run_list_failed(s: SessionLike, *, flow: str | None) -> list[str]:
    """Ids of the failed top runs (optionally of one flow), oldest first."""
    return [str(r[0]) for r in execute(s, "run_list_failed", {"flow": flow}).fetchall()]


def run_list_past_deadline(s: SessionLike, *, batch: int, now: datetime | None = None) -> list[str]:
    """Running runs past their flow's deadline at ``now`` (default the database's; at most
    ``batch``)."""
    params = {"batch": batch, "now": now}
    return [str(r[0]) for r in execute(s, "run_list_past_deadline", params)]


def run_list_stalled_sequences(s: SessionLike, *, batch: int) -> list[str]:
    """Keys of sequences whose first open run is still held (at most ``batch``)."""
    return [str(r[0]) for r in execute(s, "run_list_stalled_sequences", {"batch": batch})]


# -- retention -----------------------------------------------------------------------------


def run_purge_if_terminal(
    s: SessionLike, *, age_us: int, batch: int, now: datetime | None = None
) -> int:
    """Delete up to ``batch`` terminal top runs finished more than ``age_us`` microseconds
    before ``now`` (default the database's); how many were deleted."""
    params = {"age_us": age_us, "batch": batch, "now": now}
    return len(execute(s, "run_purge_if_terminal", params).fetchall())


def run_count_purgeable(
    s: SessionLike, *, age_us: int, now: datetime | None = None
) -> tuple[int, int]:
    """``(runs, steps)`` a purge with ``age_us`` would delete at ``now`` (default the
    database's)."""
    row = execute(s, "run_count_purgeable", {"age_us": age_us, "now": now}).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)

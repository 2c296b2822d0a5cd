"""The statements of ``sql/schedules.sql`` (table ``cyclone_schedules``), one typed function
each."""

from __future__ import annotations

from datetime import datetime

from cyclone_flow.db.conn import SessionLike, execute, execute_rows
from cyclone_flow.db.rows import DueRef, DueSchedule, ScheduleRow, rows_of

_SCHEDULE = rows_of(ScheduleRow)
_DUE_REF = rows_of(DueRef)
_DUE = rows_of(DueSchedule, columns={"input": "input_json"})


def schedule_upsert(
    s: SessionLike,
    *,
    name: str,
    flow_name: str,
    workflow_id: int,
    cron: str,
    timezone: str,
    input: str,
    source: str,
    next_run_at: datetime,
    revision: int | None = None,
) -> bool:
    """Create or update the schedule ``name`` (``revision``: the deployed revision of its
    definition, None: from a file); True when it was created."""
    params = {
        "name": name,
        "flow_name": flow_name,
        "workflow_id": workflow_id,
        "cron": cron,
        "timezone": timezone,
        "input": input,
        "source": source,
        "next_run_at": next_run_at,
        "revision": revision,
    }
    row = execute(s, "schedule_upsert", params).fetchone()
    return bool(row and row[1])


def schedule_get_source(s: SessionLike, *, name: str) -> str | None:
    """``flow`` or ``manual`` for an existing schedule; None when there is none."""
    row = execute(s, "schedule_get_source", {"name": name}).fetchone()
    return None if row is None else str(row[0])


def schedule_get_positional(
    s: SessionLike,
    *,
    flow_name: str,
    cron: str,
    timezone: str,
    input: str,
    taken: list[str],
) -> str | None:
    """The name of the ``flow`` schedule of ``flow_name`` an earlier version named by
    position (``<flow>``, ``<flow>-<n>``) with this ``cron``, ``timezone`` and ``input``
    (JSON text), not one of ``taken``; None when there is none."""
    params = {
        "flow_name": flow_name,
        "cron": cron,
        "timezone": timezone,
        "input": input,
        "taken": taken,
    }
    row = execute(s, "schedule_get_positional", params).fetchone()
    return None if row is None else str(row[0])


def schedule_delete_flow_stale(s: SessionLike, *, flow_name: str, keep: list[str]) -> list[str]:
    """Delete the ``flow`` schedules of ``flow_name`` not named in ``keep``; their names,
    sorted."""
    params = {"flow_name": flow_name, "keep": keep}
    return sorted(r[0] for r in execute(s, "schedule_delete_flow_stale", params).fetchall())


def schedule_delete(s: SessionLike, *, name: str) -> bool:
    """Delete one schedule; False when none has that name."""
    return execute(s, "schedule_delete", {"name": name}).fetchone() is not None


def schedule_set_paused(
    s: SessionLike, *, name: str, paused: bool, next_run_at: datetime | None
) -> bool:
    """Pause or resume a schedule (``next_run_at``: the next tick, when resuming); False
    when none has that name."""
    params = {"name": name, "paused": paused, "next_run_at": next_run_at}
    return execute(s, "schedule_set_paused", params).fetchone() is not None


def schedule_get(s: SessionLike, *, name: str) -> ScheduleRow | None:
    """One schedule by name; None when there is none."""
    return execute_rows(s, "schedule_get", {"name": name}, _SCHEDULE).fetchone()


def schedule_list(s: SessionLike) -> list[ScheduleRow]:
    """Every schedule, by name."""
    return execute_rows(s, "schedule_list", None, _SCHEDULE).fetchall()


def schedule_list_due(s: SessionLike, *, now: datetime, batch: int) -> list[DueRef]:
    """Unpaused schedules due at ``now``, earliest first (at most ``batch``)."""
    params = {"now": now, "batch": batch}
    return execute_rows(s, "schedule_list_due", params, _DUE_REF).fetchall()


def schedule_lock_due(s: SessionLike, *, id: int, now: datetime) -> DueSchedule | None:
    """Lock a due schedule for this transaction (SKIP LOCKED); None when another client
    holds it or it is no longer due."""
    return execute_rows(s, "schedule_lock_due", {"id": id, "now": now}, _DUE).fetchone()


def schedule_lock_named(s: SessionLike, *, name: str) -> DueSchedule | None:
    """Lock the schedule ``name`` for this transaction, paused or not, due or not (waits
    for a concurrent tick's transaction); None when there is none."""
    return execute_rows(s, "schedule_lock_named", {"name": name}, _DUE).fetchone()


def schedule_set_last_run(s: SessionLike, *, id: int, at: datetime, run_id: str) -> bool:
    """Record ``run_id`` (submitted at ``at``) as the last run of schedule ``id``, leaving
    ``next_run_at`` alone; False when the schedule is gone."""
    params = {"id": id, "at": at, "run_id": run_id}
    return execute(s, "schedule_set_last_run", params).fetchone() is not None


def schedule_advance_if_unchanged(
    s: SessionLike,
    *,
    id: int,
    expected: datetime,
    next_run_at: datetime,
    tick: datetime,
    run_id: str,
) -> bool:
    """The tick's compare-and-swap on ``next_run_at`` (still ``expected``); False when
    stale."""
    params = {
        "id": id,
        "expected": expected,
        "next_run_at": next_run_at,
        "tick": tick,
        "run_id": run_id,
    }
    return execute(s, "schedule_advance_if_unchanged", params).fetchone() is not None


def schedule_set_revision_for_flow(
    s: SessionLike, *, flow_name: str, workflow_id: int, revision: int
) -> list[str]:
    """Point every schedule of ``flow_name`` at the definition of its current deployed
    ``revision``; the names changed, sorted."""
    params = {"flow_name": flow_name, "workflow_id": workflow_id, "revision": revision}
    return sorted(r[0] for r in execute(s, "schedule_set_revision_for_flow", params))


def schedule_pause_for_flow(s: SessionLike, *, flow_name: str) -> list[str]:
    """Pause every unpaused schedule of ``flow_name``; their names, sorted."""
    return sorted(r[0] for r in execute(s, "schedule_pause_for_flow", {"flow_name": flow_name}))


def schedule_list_for_flow(s: SessionLike, *, flow_name: str) -> list[ScheduleRow]:
    """Every schedule of ``flow_name``, by name."""
    params = {"flow_name": flow_name}
    return execute_rows(s, "schedule_list_for_flow", params, _SCHEDULE).fetchall()

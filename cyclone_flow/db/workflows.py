"""The statements of ``sql/workflows.sql`` (table ``cyclone_workflows``), one typed function
each."""

from __future__ import annotations

from cyclone_flow.db.conn import SessionLike, execute, execute_rows
from cyclone_flow.db.rows import FlowRow, StoredWorkflow, rows_of

_STORED = rows_of(StoredWorkflow)
_FLOW = rows_of(FlowRow)


def workflow_upsert(
    s: SessionLike, *, name: str, digest: str, definition: str, plan: str
) -> StoredWorkflow | None:
    """Store a definition (JSON text) and its plan once per ``(name, digest)``; its id and
    whether the stored row lacks a plan. None only when a concurrent first insert of the
    same digest had not committed when the statement started (ask again)."""
    params = {"name": name, "digest": digest, "definition": definition, "plan": plan}
    return execute_rows(s, "workflow_upsert", params, _STORED).fetchone()


def workflow_exists(s: SessionLike, *, id: int) -> bool:
    """Whether definition ``id`` is stored."""
    row = execute(s, "workflow_exists", {"id": id}).fetchone()
    return bool(row and row[0])


def workflow_fill_plan_if_missing(s: SessionLike, *, id: int, plan: str) -> None:
    """Give a definition stored before plans existed its plan."""
    execute(s, "workflow_fill_plan_if_missing", {"id": id, "plan": plan})


def workflow_list(s: SessionLike, *, limit: int, name: str | None = None) -> list[FlowRow]:
    """Stored definitions (without their document), newest first, at most ``limit``."""
    return execute_rows(s, "workflow_list", {"limit": limit, "name": name}, _FLOW).fetchall()


def workflow_get(s: SessionLike, *, id: int) -> FlowRow | None:
    """One stored definition with its document; None when there is no such id."""
    return execute_rows(s, "workflow_get", {"id": id}, _FLOW).fetchone()

"""The statements of ``sql/deps.sql`` (table ``cyclone_deps``), one typed function each."""

from __future__ import annotations

from collections.abc import Sequence

from cyclone_flow.db.conn import Pending, SessionLike, execute, execute_rows, nothing
from cyclone_flow.db.rows import Downstream, rows_of

_DOWNSTREAM = rows_of(Downstream)


def dep_insert_plan(s: SessionLike, *, run_id: str, workflow_id: int) -> None:
    """Write the graph of a new run from its definition's plan: one row per edge."""
    execute(s, "dep_insert_plan", {"run_id": run_id, "workflow_id": workflow_id})


def send_dep_insert_plan_many(
    s: SessionLike, *, run_ids: Sequence[str], workflow_id: int
) -> Pending[None]:
    """Send ``dep_insert_plan_many``: the graphs of the new runs ``run_ids`` of definition
    ``workflow_id``, one row per (run, edge)."""
    cur = execute(s, "dep_insert_plan_many", {"run_ids": run_ids, "workflow_id": workflow_id})
    return Pending(cur, nothing)


def dep_list_downstream(s: SessionLike, *, run_id: str, node: str) -> list[Downstream]:
    """Every node downstream of ``node`` (transitively) with its on_dep_failure policy."""
    params = {"run_id": run_id, "node": node}
    return execute_rows(s, "dep_list_downstream", params, _DOWNSTREAM).fetchall()


def dep_list(s: SessionLike, *, run_id: str) -> dict[str, list[str]]:
    """The needs of each node of a run that has any: node -> its dependencies, sorted."""
    out: dict[str, list[str]] = {}
    for node, depends_on in execute(s, "dep_list", {"run_id": run_id}).fetchall():
        out.setdefault(str(node), []).append(str(depends_on))
    return out


def dep_insert_plan_many(s: SessionLike, *, run_ids: Sequence[str], workflow_id: int) -> None:
    """Write the graphs of the new runs ``run_ids`` (see :func:`send_dep_insert_plan_many`)."""
    send_dep_insert_plan_many(s, run_ids=run_ids, workflow_id=workflow_id).result()

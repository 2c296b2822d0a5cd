"""The statements of ``sql/flow_revisions.sql`` (tables ``cyclone_flow_revisions`` and
``cyclone_flows``: deployed revisions of flows), one typed function each."""

from __future__ import annotations

from cyclone_flow.db.conn import SessionLike, execute, execute_rows
from cyclone_flow.db.rows import (
    DeployedFlow,
    InsertedRevision,
    Revision,
    WaitingRun,
    rows_of,
)

_FLOW = rows_of(DeployedFlow)
_REVISION = rows_of(Revision)
_INSERTED = rows_of(InsertedRevision)
_WAITING = rows_of(WaitingRun)

RUNS_COUNTED_PER_DAY = 100_000
"""``flow_list`` counts each flow's runs of the last day among this many newest runs."""


def flow_lock_deploys(s: SessionLike) -> None:
    """Serialise changes of the deployed flows of this schema until the transaction ends
    (deploy, rollback, retire); submits by name are not blocked."""
    execute(s, "flow_lock_deploys", {})


def flow_get(s: SessionLike, *, name: str) -> DeployedFlow | None:
    """The deployed flow ``name`` with its current revision's facts (``runs_last_day``
    None); None when it was never deployed."""
    return execute_rows(s, "flow_get", {"name": name}, _FLOW).fetchone()


def flow_get_for_submit(s: SessionLike, *, name: str) -> DeployedFlow | None:
    """The deployed flow ``name``, its row locked FOR SHARE until the transaction ends (a
    submit by name: a concurrent retire waits), without the revision's facts; None when it
    was never deployed."""
    return execute_rows(s, "flow_get_for_submit", {"name": name}, _FLOW).fetchone()


def flow_list(s: SessionLike, *, cap: int = RUNS_COUNTED_PER_DAY) -> list[DeployedFlow]:
    """Every deployed flow by name, with its current revision's facts and its runs of the
    last day (counted among the newest ``cap`` runs of that day)."""
    return execute_rows(s, "flow_list", {"cap": cap}, _FLOW).fetchall()


def flow_set_current(s: SessionLike, *, name: str, revision: int) -> int | None:
    """Make ``revision`` current for flow ``name`` (un-retiring it); the previous current
    revision, None when the flow is new."""
    row = execute(s, "flow_set_current", {"name": name, "revision": revision}).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def flow_retire_if_active(s: SessionLike, *, name: str, by: str) -> bool:
    """Retire flow ``name``; False when it is unknown or already retired."""
    return execute(s, "flow_retire_if_active", {"name": name, "by": by}).fetchone() is not None


def revision_insert(
    s: SessionLike,
    *,
    flow_name: str,
    workflow_id: int,
    source: str,
    source_path: str | None,
    kind: str,
    rollback_of: int | None,
    deployed_by: str,
    git_commit: str | None,
    git_path: str | None,
    git_dirty: bool | None,
) -> InsertedRevision:
    """Store the next revision of ``flow_name`` (call under :func:`flow_lock_deploys`)."""
    params = {
        "flow_name": flow_name,
        "workflow_id": workflow_id,
        "source": source,
        "source_path": source_path,
        "kind": kind,
        "rollback_of": rollback_of,
        "deployed_by": deployed_by,
        "git_commit": git_commit,
        "git_path": git_path,
        "git_dirty": git_dirty,
    }
    row = execute_rows(s, "revision_insert", params, _INSERTED).fetchone()
    assert row is not None  # an INSERT ... SELECT without a WHERE returns its row
    return row


def revision_get(s: SessionLike, *, flow_name: str, revision: int | None) -> Revision | None:
    """Revision ``revision`` of ``flow_name`` (None: the current one) with its source and
    definition; None when there is no such flow or revision."""
    params = {"flow_name": flow_name, "revision": revision}
    return execute_rows(s, "revision_get", params, _REVISION).fetchone()


def revision_list(s: SessionLike, *, flow_name: str) -> list[Revision]:
    """Every revision of ``flow_name``, newest first, with its run count (no source)."""
    return execute_rows(s, "revision_list", {"flow_name": flow_name}, _REVISION).fetchall()


def revision_list_waiting_runs(s: SessionLike, *, flow_name: str, limit: int) -> list[WaitingRun]:
    """Running top runs of ``flow_name`` none of whose steps ever started (a step given
    back by a worker started) or became claimable yet (delayed or held by a sequence),
    oldest first, at most ``limit``."""
    params = {"flow_name": flow_name, "limit": limit}
    return execute_rows(s, "revision_list_waiting_runs", params, _WAITING).fetchall()

"""The statements of ``sql/workers.sql`` (table ``cyclone_workers``), one typed function
each: the heartbeat rows of started clients (who serves which queue, and whether alive)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from cyclone_flow.db.conn import SessionLike, execute, execute_rows
from cyclone_flow.db.rows import WorkerRow, rows_of

_WORKER = rows_of(WorkerRow)


def worker_upsert(
    s: SessionLike,
    *,
    client_id: str,
    hostname: str,
    pid: int,
    queues: Mapping[str, int],
    only_run: str | None,
    lease_ttl_s: float,
    version: str,
) -> None:
    """Write (or refresh) the heartbeat row of ``client_id``; ``queues`` maps each served
    queue to its worker threads; ``heartbeat_at`` becomes the database's now()."""
    execute(
        s,
        "worker_upsert",
        {
            "client_id": client_id,
            "hostname": hostname,
            "pid": pid,
            "queues": list(queues),
            "slots": list(queues.values()),
            "only_run": only_run,
            "lease_ttl_s": lease_ttl_s,
            "version": version,
        },
    )


def worker_delete(s: SessionLike, *, client_id: str) -> bool:
    """Delete the heartbeat row of ``client_id``; False when there was none."""
    return execute(s, "worker_delete", {"client_id": client_id}).rowcount > 0


def worker_delete_if_stale(
    s: SessionLike, *, factor: float, now: datetime | None = None
) -> list[str]:
    """Delete the rows not heartbeated for ``factor`` x their lease TTL before ``now``
    (None: the database's clock); return their client ids."""
    rows = execute(s, "worker_delete_if_stale", {"factor": factor, "now": now}).fetchall()
    return [str(r[0]) for r in rows]


def worker_list(s: SessionLike, *, now: datetime | None = None) -> list[WorkerRow]:
    """Every heartbeat row with its liveness at ``now`` (None: the database's clock), live
    ones first."""
    return execute_rows(s, "worker_list", {"now": now}, _WORKER).fetchall()

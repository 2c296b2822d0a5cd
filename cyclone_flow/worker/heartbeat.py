"""The heartbeat of a started client (Engine Design: Leases and Heartbeats): every
``lease_ttl / 3`` seconds one statement renews every lease this client holds, each row
guarded by its claim's lease generation and the step's timeout. A lease that is not
renewed is lost (the step was reclaimed, cancelled, timed out or completed): its handler
is told through its cancel event, and the lease is not sent again.

The same beat refreshes the client's row of ``cyclone_workers`` (:class:`WorkerIdentity`:
who serves which queues), written first at start (:meth:`Heartbeat.register`) and
deleted at a clean shutdown (:meth:`Heartbeat.unregister`); ``Client.workers()`` and
``cyclone-flow workers`` read it, and "why is it waiting" looks for a live worker of a
step's queue there.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata

from cyclone_flow.db import session, workers
from cyclone_flow.db.conn import Database, Session, retry_conflicts
from cyclone_flow.db.errors import database_lost, wait_bound_passed
from cyclone_flow.engine import claim
from cyclone_flow.events import Reporter

__all__ = ["Heartbeat", "HeartbeatResult", "HeldLease", "WorkerIdentity", "register_owner"]


class HeldLease(threading.Event):
    """The cancel event of one lease a started client holds (set when its handler should
    stop: the lease was lost, the step timed out, the client shuts down), with ``lost``:
    set only when a beat found the lease gone (not renewed: reclaimed after this worker
    stalled past its TTL, cancelled, timed out), which the handler sees as
    ``ctx.lease_lost`` (docs/flow-control.md: another worker may run the step now)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = threading.Event()


@cache
def _version() -> str:
    try:
        return metadata.version("cyclone-flow")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


@dataclass(frozen=True)
class WorkerIdentity:
    """What a started client's ``cyclone_workers`` row says about it: ``queues`` (queue
    -> worker threads), ``only_run`` (a ``cyclone-flow run`` process claims only that
    run's steps), and the host, process id and cyclone-flow version (defaults: this
    process)."""

    queues: Mapping[str, int]
    only_run: str | None = None
    hostname: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    version: str = field(default_factory=_version)


def register_owner(
    s: Session, *, client_id: str, queues: Mapping[str, int], lease_ttl_s: float, run_id: str
) -> None:
    """Write the heartbeat row of client ``client_id`` (serving ``queues``: queue -> worker
    threads) claiming only ``run_id``, on ``s`` (the submitting transaction of an isolated
    run: its owner is live from the run's first commit, before ``start(run_id=...)``)."""
    identity = WorkerIdentity(dict(queues), run_id)
    workers.worker_upsert(
        s,
        client_id=client_id,
        hostname=identity.hostname,
        pid=identity.pid,
        queues=identity.queues,
        only_run=run_id,
        lease_ttl_s=lease_ttl_s,
        version=identity.version,
    )


@dataclass(frozen=True)
class HeartbeatResult:
    """What one beat did: leases ``sent``, ``renewed``, and handlers ``told`` that their
    lease is lost (not counting completions already handed over to the group commit)."""

    sent: int = 0
    renewed: int = 0
    told: int = 0


class Heartbeat:
    """Renews the leases of a worker's lease table.

    ``leases`` maps ``(step id, lease_generation)`` to the cancel event of the handler
    holding it, ``handed`` holds the leases whose completion waits in the group commit; both
    belong to the worker and are read and changed only under ``lock``. ``reporter`` logs
    and counts a failed beat (default: one on ``logger``)."""

    def __init__(
        self,
        db: Database,
        owner: str,
        lease_ttl_s: float,
        lock: threading.Lock,
        leases: dict[tuple[int, int], threading.Event],
        handed: set[tuple[int, int]],
        logger: logging.Logger,
        identity: WorkerIdentity | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        self.db = db
        self.owner = owner
        self.lease_ttl_s = lease_ttl_s
        self.interval_s = lease_ttl_s / 3
        self.lock = lock
        self.leases = leases
        self.handed = handed
        self.log = logger
        self.identity = identity
        self.reporter = reporter or Reporter(logger)

    def run_once(self) -> HeartbeatResult:
        """One beat: renew every lease not known lost (one statement); tell the handlers
        whose lease was not renewed. A failed statement is logged and tells no one (the
        next beat tries again; a serialization failure or deadlock is tried again at
        once)."""
        with self.lock:  # leases already known lost are not sent again
            leases = [lease for lease, told in self.leases.items() if not told.is_set()]
            handed = set(self.handed)
        if not leases:
            return HeartbeatResult()

        def beat() -> set[tuple[int, int]]:
            with self.db.session() as s:
                return claim.extend_leases(s, self.owner, self.lease_ttl_s, leases)

        try:
            renewed = retry_conflicts(beat)
        except Exception as exc:
            self.reporter.trouble("heartbeat", exc, "heartbeat failed for %d leases", len(leases))
            return HeartbeatResult(len(leases))
        told = 0
        with self.lock:
            for lease in leases:
                cancel = self.leases.get(lease)  # None: the step finished meanwhile
                if lease not in renewed and cancel is not None:
                    if isinstance(cancel, HeldLease):
                        cancel.lost.set()
                    cancel.set()
                    # a handed-over step not renewed was committed, or its completion
                    # will be stale; its handler has returned either way
                    told += lease not in handed
        if told:
            self.log.info("lost the lease of %d step(s); their handlers are told", told)
        return HeartbeatResult(len(leases), len(renewed), told)

    def register(self) -> bool:
        """Write (or refresh) this client's ``cyclone_workers`` row (with ``heartbeat_at``
        the database's now); a no-op without an identity. A failure is logged, never
        raised (the next beat tries again); returns whether the row was written."""
        identity = self.identity
        if identity is None:
            return False
        try:
            with self.db.session() as s:
                workers.worker_upsert(
                    s,
                    client_id=self.owner,
                    hostname=identity.hostname,
                    pid=identity.pid,
                    queues=identity.queues,
                    only_run=identity.only_run,
                    lease_ttl_s=self.lease_ttl_s,
                    version=identity.version,
                )
        except Exception as exc:
            self.reporter.trouble(
                "heartbeat", exc, "could not write the heartbeat row of worker %s", self.owner
            )
            return False
        return True

    def unregister(
        self, *, wait: float | None = None, statement_timeout_s: float | None = None
    ) -> bool:
        """Delete this client's ``cyclone_workers`` row (clean shutdown); a failure is
        logged (the worker reaper deletes the row later). ``wait``: seconds to wait for a
        pool connection (None: the pool's timeout); ``statement_timeout_s``: seconds the
        delete may wait for a lock or run (None: no bound). Returns False when the
        database was out of reach (:func:`~cyclone_flow.db.errors.database_lost`), else
        True."""
        if self.identity is None:
            return True
        try:
            with self.db.session(wait=wait) as s:
                if statement_timeout_s is not None:
                    session.session_bound_waits(s, seconds=statement_timeout_s)
                workers.worker_delete(s, client_id=self.owner)
        except Exception as exc:
            if statement_timeout_s is not None and wait_bound_passed(exc):
                self.log.warning(
                    "could not delete the heartbeat row of worker %s within %.1fs; the "
                    "worker reaper deletes it",
                    self.owner,
                    statement_timeout_s,
                )
                return True
            self.reporter.trouble(
                "heartbeat", exc, "could not delete the heartbeat row of worker %s", self.owner
            )
            return not database_lost(exc)
        return True

    def run(self, stop: threading.Event) -> None:
        """Beat every ``interval_s`` seconds until ``stop`` is set: refresh the worker row,
        then renew the leases."""
        while not stop.wait(self.interval_s):
            self.register()
            self.run_once()

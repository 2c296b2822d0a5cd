"""Every wakeup of one client in one place (:class:`WakeupHub`): publishing, tracked
caller-owned transactions, the listener, and the run waiters of :meth:`Client.wait
<cyclone_flow.Client.wait>`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from logging import Logger
from typing import Protocol

import psycopg

from cyclone_flow.db.conn import Conn, Database
from cyclone_flow.db.errors import ride_out
from cyclone_flow.db.rows import Run
from cyclone_flow.errors import TransactionOpenError, WaitTimeoutError
from cyclone_flow.notify.listener import Listener
from cyclone_flow.notify.publisher import Publisher
from cyclone_flow.notify.tracking import TrackedConnections, WakeupTracker
from cyclone_flow.notify.wakeups import Wakeups


class WakeTarget(Protocol):
    """What the hub wakes besides the waiters: a client's started worker machinery."""

    def notice_available(self, queues: list[str]) -> None: ...

    def wake(self) -> None: ...


class _OutageLog:
    """One warning when the waiters of a hub lose the database, one when a read works
    again (however many waits, or retries of one, meet the outage)."""

    def __init__(self, logger: Logger) -> None:
        self._log, self._lost = logger, False

    def lost(self, exc: Exception) -> None:
        if self._lost:
            return
        self._lost = True
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        self._log.warning("wait: the database is out of reach (%s); retrying", first)

    def over(self) -> None:
        if self._lost:
            self._lost = False
            self._log.warning("wait: the database is back")


LISTENER_READY_S = 2.0
"""How long :meth:`WakeupHub.wait` lets a starting listener connect before its first look."""


class WakeupHub:
    """Every wakeup of one client in one place: the :class:`Publisher` that publishes after
    each commit, the :class:`TrackedConnections` of caller-owned transactions, the one
    :class:`Listener` (started on first need), and the waiters of :meth:`wait`.

    ``liveness``: the listener's quiet seconds before a liveness ping (:class:`Listener`).

    A notification for this schema wakes the waiters of the runs it names and, through
    ``worker()`` (the client's started worker, or None), the claim loop of the queues it
    names; a (re)established LISTEN wakes everyone, since what was published while nobody
    listened is lost. Wakeups this client publishes wake its own waiters at once, without
    a round trip through Postgres.
    """

    def __init__(
        self,
        db: Database,
        *,
        coalesce: float,
        logger: Logger,
        worker: Callable[[], WakeTarget | None],
        liveness: float = 0.5,
    ) -> None:
        self._db = db
        self._log = logger
        self._worker = worker
        self._liveness = liveness
        self._outage = _OutageLog(logger)
        self.publisher = Publisher(db, coalesce=coalesce, logger=logger)
        self.tracking = TrackedConnections()
        self._listener: Listener | None = None
        self._lock = threading.Lock()  # guards _listener and _closed
        self._closed = False
        self._waiters: dict[str, set[threading.Event]] = {}
        self._waiters_lock = threading.Lock()

    # -- publishing ------------------------------------------------------------------------

    def publish(self, wakeups: Wakeups, conn: Conn | None = None) -> None:
        """Publish ``wakeups`` of a committed transaction (this client's waiters are told
        at once), on ``conn`` when given (idle, just committed); a failure is logged at
        error level and loses no work (the polling floor finds it)."""
        if not wakeups:
            return
        for run_id in wakeups.runs_done:
            self._run_done(run_id)
        self.publisher.publish(wakeups, conn)

    def track(self, conn: Conn, publish: Callable[[Conn], None]) -> WakeupTracker:
        """Record the wakeups of caller-owned transactions on ``conn`` from now on; the
        returned tracker publishes them through ``publish(conn)``."""
        self.tracking.track(conn)
        return WakeupTracker(conn, self.tracking, publish)

    def record(self, conn: Conn, wakeups: Wakeups) -> None:
        """Keep ``wakeups`` of a caller-owned transaction on ``conn`` (only when tracked)."""
        self.tracking.record(conn, wakeups)

    def publish_tracked(self, conn: Conn) -> None:
        """Publish what was recorded on ``conn`` and stop tracking it (a no-op when it is
        not tracked). Raises :class:`TransactionOpenError`, keeping the record, while
        ``conn`` is inside a transaction."""
        status = conn.info.transaction_status
        if status in (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR):
            raise TransactionOpenError(status.name)
        wakeups = self.tracking.take(conn)
        if wakeups:
            self.publish(wakeups)

    # -- listening -------------------------------------------------------------------------

    @property
    def listener(self) -> Listener | None:
        """The running listener, or None (not started yet, or shut down)."""
        return self._listener

    def listen(self) -> Listener | None:
        """The one LISTEN connection, started on first call; None once shut down."""
        with self._lock:
            if self._closed:
                return None
            if self._listener is None:
                self._listener = Listener(
                    self._db,
                    self._log,
                    on_available=self._on_available,
                    on_run_done=self._on_runs_done,
                    on_connected=self._on_listening,
                    liveness=self._liveness,
                )
                self._listener.start()
            return self._listener

    def _on_available(self, queues: list[str]) -> None:
        worker = self._worker()
        if worker is not None:
            worker.notice_available(queues)

    def _on_runs_done(self, run_ids: list[str]) -> None:
        for run_id in run_ids:
            self._run_done(run_id)

    def _on_listening(self) -> None:
        # Wakeups published while nobody listened are lost: look again now.
        worker = self._worker()
        if worker is not None:
            worker.wake()
        with self._waiters_lock:
            for events in self._waiters.values():
                for event in events:
                    event.set()

    def _run_done(self, run_id: str) -> None:
        with self._waiters_lock:
            for event in self._waiters.get(run_id, ()):
                event.set()

    # -- waiting ---------------------------------------------------------------------------

    def wait(
        self,
        run_id: str,
        read: Callable[[], Run],
        *,
        timeout: float | None,
        poll_interval: tuple[float, float],
        listen: bool,
    ) -> Run:
        """Return ``read()`` (the run ``run_id``) once its state is terminal, looking again
        at each wakeup for the run and at least every ``poll_interval`` (min, doubling up
        to max) seconds; with ``listen``, LISTEN first (started on first need) so that no
        wakeup slips by. ``timeout`` in seconds (None: no limit).

        ``read`` failing because the database is out of reach
        (:func:`~cyclone_flow.db.errors.database_lost`: a restart, an outage) is retried
        (:func:`~cyclone_flow.db.errors.ride_out`, one warning per outage) until the
        timeout, or for :data:`~cyclone_flow.db.errors.OUTAGE_GRACE_S` without one.

        Raises :class:`WaitTimeoutError` when ``timeout`` passes first, the last database
        error when the database stayed out of reach that long, and whatever else ``read``
        raises.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        event = threading.Event()
        with self._waiters_lock:
            self._waiters.setdefault(run_id, set()).add(event)
        try:
            listener = self.listen() if listen else None
            if listener is not None:  # listen before the first look: no wakeup slips by
                ready_for = (
                    LISTENER_READY_S
                    if deadline is None
                    else min(LISTENER_READY_S, max(0.0, deadline - time.monotonic()))
                )
                listener.ready.wait(ready_for)
            lo, hi = poll_interval
            interval = lo
            while True:
                status = ride_out(read, deadline=deadline, on_lost=self._outage.lost)
                self._outage.over()
                if status.state.terminal:
                    return status
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    assert timeout is not None
                    raise WaitTimeoutError(run_id, timeout, str(status.state))
                if event.wait(interval if left is None else min(interval, left)):
                    event.clear()
                else:
                    interval = min(interval * 2, hi)
        finally:
            with self._waiters_lock:
                events = self._waiters.get(run_id)
                if events is not None:
                    events.discard(event)
                    if not events:
                        del self._waiters[run_id]

    # -- shutdown --------------------------------------------------------------------------

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the listener (none starts afterwards), then seal the publisher's buffer and
        publish what is left (:meth:`Publisher.shutdown`, up to ``timeout`` seconds)."""
        with self._lock:
            self._closed = True
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
        self.publisher.shutdown(timeout)

"""Wakeups: publishing them after the commit, and listening for them (Engine Design:
LISTEN/NOTIFY and the Polling Floor; Client Options: Notifications, WithNotify,
WithNotifyCoalesce).

Two channels, shared by every schema and queue (a channel per queue would put queue names
into Postgres' channel namespace and force a new LISTEN per queue):

- ``cyclone_available``: ``{"schema": "<schema>", "queues": ["<queue>", ...]}`` — work
  became claimable in those queues (submit, a released dependent, a retry, a reclaim, a
  released lease, :meth:`Client.publish_wakeups <cyclone_flow.Client.publish_wakeups>`).
- ``cyclone_run_done``: ``{"schema": "<schema>", "run_ids": ["<uuid>", ...]}`` — those runs
  became terminal (completed, failed or cancelled); :meth:`Client.wait
  <cyclone_flow.Client.wait>` listens for it.

One notification can name several queues or runs (a batch); a batch whose payload would pass
Postgres' 8000-byte limit is split. Wakeups are latency hints only: publication is
best-effort, every failure is logged at error level and loses no work, because the claim
loop polls at least every ``poll_interval`` max seconds (the polling floor).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from logging import Logger
from typing import Protocol

import psycopg

from cyclone_flow._json import dumps
from cyclone_flow.db import misc
from cyclone_flow.db.conn import Conn, Database, Session, autocommit
from cyclone_flow.db.errors import (
    database_lost,
    prepared_statement_lost,
    ride_out,
    warn_prepared_statements,
)
from cyclone_flow.db.pool import close_and_return
from cyclone_flow.db.rows import Run
from cyclone_flow.errors import TransactionOpenError, WaitTimeoutError

CHANNEL_AVAILABLE = "cyclone_available"
CHANNEL_RUN_DONE = "cyclone_run_done"


@dataclass
class Wakeups:
    """Wakeup hints collected by transitions (in the engine's ``Effects``); published only
    after the commit succeeds (Engine Design: LISTEN/NOTIFY and the Polling Floor):
    ``queues`` with work newly claimable, ``runs_done`` runs that became terminal."""

    queues: set[str] = field(default_factory=set)
    runs_done: set[str] = field(default_factory=set)

    def merge(self, other: Wakeups) -> None:
        self.queues |= other.queues
        self.runs_done |= other.runs_done

    def __bool__(self) -> bool:
        return bool(self.queues or self.runs_done)


class Publish(Protocol):
    """Publishes the wakeups of a transaction that has committed; ``conn``: the idle
    connection it committed on, for an inline send (None: a pool connection). Never
    raises for a failed send (:meth:`Publisher.publish`, ``Client._publish``)."""

    def __call__(self, wakeups: Wakeups, conn: Conn | None = None, /) -> None: ...


# Postgres rejects a payload of 8000 bytes or more; stay clear of it.
MAX_PAYLOAD_BYTES = 7_900
_LISTEN_POLL_S = 0.25  # how often the listener looks at its stop flag while idle
_RECONNECT_MIN_S = 0.1
_RECONNECT_MAX_S = 5.0
_GETCONN_S = 1.0  # how long the listener waits for a pool connection at a time
_LIVENESS_MIN_S = 0.1  # the shortest quiet time after which the listener pings
_PING_TIMEOUT_MIN_S = 1.0  # a ping unanswered this long (or liveness) cuts the connection
_STOP_GRACE_S = 2 * _LISTEN_POLL_S  # stop() cuts a socket the thread is still blocked on


def encode(schema: str, wakeups: Wakeups) -> list[tuple[str, str]]:
    """The ``(channel, payload)`` notifications announcing ``wakeups`` of ``schema``: one
    per channel, split when a payload would pass :data:`MAX_PAYLOAD_BYTES`."""
    notes: list[tuple[str, str]] = []
    for channel, key, values in (
        (CHANNEL_AVAILABLE, "queues", sorted(wakeups.queues)),
        (CHANNEL_RUN_DONE, "run_ids", sorted(wakeups.runs_done)),
    ):
        batch: list[str] = []
        for value in values:
            if batch and _payload_size(schema, key, [*batch, value]) > MAX_PAYLOAD_BYTES:
                notes.append((channel, dumps({"schema": schema, key: batch})))
                batch = []
            batch.append(value)
        if batch:
            notes.append((channel, dumps({"schema": schema, key: batch})))
    return notes


def _payload_size(schema: str, key: str, values: list[str]) -> int:
    return len(dumps({"schema": schema, key: values}).encode("utf-8"))


def decode(channel: str, payload: str, schema: str) -> list[str] | None:
    """The queues (``cyclone_available``) or run ids (``cyclone_run_done``) a notification
    names for ``schema``; None for another schema, another channel or a payload that is not
    ours."""
    key = {CHANNEL_AVAILABLE: "queues", CHANNEL_RUN_DONE: "run_ids"}.get(channel)
    if key is None:
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("schema") != schema:
        return None
    values = data.get(key)
    if not isinstance(values, list):
        return None
    return [v for v in values if isinstance(v, str)]


class Publisher:
    """Publishes the wakeups of committed transactions for one client (Client Options:
    WithNotifyCoalesce, "Producer-only clients must be shut down").

    ``coalesce`` is the window in seconds. With 0 every :meth:`publish` sends at once, on the
    caller's thread, and no thread is ever started. With a window, the first wakeup after a
    quiet period is still sent inline (an idle publisher never waits) and opens a window of
    ``coalesce`` seconds; wakeups that arrive inside an active window are merged in a buffer
    that one background thread (started on first use) sends as one batch when the window
    ends, which opens the next window. A buffered wakeup therefore waits at most
    ``coalesce`` seconds. :meth:`shutdown` seals the buffer, waits for a send in flight and
    sends what is left.

    Every failure to send is logged at error level on ``logger`` and counted in
    :attr:`failures`; it loses no work (the polling floor finds it).

    Counters (read them, never write them): :attr:`notifications` (pg_notify calls sent),
    :attr:`batches` (sends), :attr:`failures` (sends that failed).
    """

    THREAD_NAME = "cyclone-notify-coalesce"

    def __init__(self, db: Database, *, coalesce: float, logger: Logger) -> None:
        self._db = db
        self._coalesce = coalesce
        self._log = logger
        self._cond = threading.Condition()
        self._buffer = Wakeups()
        self._window_end: float | None = None  # monotonic end of the active window
        self._in_flight = 0
        self._sealed = False
        self._thread: threading.Thread | None = None
        self.notifications = 0
        self.batches = 0
        self.failures = 0

    @property
    def coalesce(self) -> float:
        """The coalesce window in seconds (0: publish every wakeup at once)."""
        return self._coalesce

    @property
    def thread(self) -> threading.Thread | None:
        """The coalescing thread, or None when none was needed (always None without a
        window)."""
        return self._thread

    def publish(self, wakeups: Wakeups, conn: Conn | None = None) -> None:
        """Announce ``wakeups`` of a transaction that has committed. ``conn``: an idle
        connection the caller just committed on, used for an inline send instead of a pool
        connection. Never raises for a failed send (logged at error level)."""
        if not wakeups:
            return
        if self._coalesce > 0:
            with self._cond:
                now = time.monotonic()
                active = self._window_end is not None and (
                    now < self._window_end or bool(self._buffer)
                )
                if active and not self._sealed:
                    self._buffer.merge(wakeups)
                    self._ensure_thread()
                    self._cond.notify_all()
                    return
                if not self._sealed:
                    self._window_end = now + self._coalesce
                self._in_flight += 1
            try:
                self._send(wakeups, conn)
            finally:
                with self._cond:
                    self._in_flight -= 1
                    self._cond.notify_all()
            return
        self._send(wakeups, conn)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Seal the buffer (later wakeups are sent inline), wait up to ``timeout`` seconds
        for a send in flight, then send what is buffered and stop the thread. Safe to call
        twice."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            self._sealed = True
            self._cond.notify_all()
            while self._in_flight and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            batch, self._buffer = self._buffer, Wakeups()
            self._window_end = None
        if batch:
            self._send(batch, None)
        thread = self._thread
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _ensure_thread(self) -> None:
        if self._thread is None:  # called under self._cond
            self._thread = threading.Thread(
                target=self._flush_loop, name=self.THREAD_NAME, daemon=True
            )
            self._thread.start()

    def _flush_loop(self) -> None:
        with self._cond:
            while not self._sealed:
                if not self._buffer or self._window_end is None:
                    self._cond.wait()
                    continue
                delay = self._window_end - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                batch, self._buffer = self._buffer, Wakeups()
                self._window_end = time.monotonic() + self._coalesce  # we publish now
                self._in_flight += 1
                self._cond.release()
                try:
                    self._send(batch, None)
                finally:
                    self._cond.acquire()
                    self._in_flight -= 1
                    self._cond.notify_all()

    def _send(self, wakeups: Wakeups, conn: Conn | None) -> None:
        notes = encode(self._db.schema, wakeups)
        try:
            self._notify(conn, notes)
        except Exception as exc:
            with self._cond:
                self.failures += 1
            # a restart, an outage or a misconfigured pooler: one line, no traceback
            lost = database_lost(exc) or prepared_statement_lost(exc)
            if prepared_statement_lost(exc):
                warn_prepared_statements(self._log, exc)  # once per process, naming the fix
            self._log.log(
                logging.WARNING if lost else logging.ERROR,
                "could not publish wakeups (queues %s, %d finished run(s)); polling finds "
                "the work within poll_interval max%s",
                sorted(wakeups.queues),
                len(wakeups.runs_done),
                f" (database unreachable: {type(exc).__name__})" if lost else "",
                exc_info=not lost,
            )
            return
        with self._cond:
            self.notifications += len(notes)
            self.batches += 1

    def _notify(self, conn: Conn | None, notes: list[tuple[str, str]]) -> None:
        """Send ``notes`` in one statement that commits at once, on ``conn`` (an idle
        connection whose last transaction has committed; switched to autocommit for the
        statement and back) or, when None, on a pool connection. Raises psycopg errors."""
        if not notes:
            return
        channels, payloads = [n[0] for n in notes], [n[1] for n in notes]
        if conn is None:
            with self._db.pool.connection() as pooled, autocommit(pooled):
                misc.notify_publish(
                    Session(pooled, self._db.q), channels=channels, payloads=payloads
                )
        else:
            with autocommit(conn):  # one round trip: no BEGIN/COMMIT around the pg_notify
                misc.notify_publish(Session(conn, self._db.q), channels=channels, payloads=payloads)


class Listener:
    """One LISTEN connection for a client, held from the pool for the client's life (Engine
    Design: Pool Budget), on both wakeup channels; notifications for other schemas are
    ignored.

    ``on_available(queues)`` gets the queue names of each ``cyclone_available``
    notification, ``on_run_done(run_ids)`` the run ids of each ``cyclone_run_done`` one;
    ``on_connected()`` is called each time LISTEN is (re)established, since whatever was
    published while not listening is lost: callers re-check then. A dead connection (e.g.
    ``pg_terminate_backend``, a restart) is replaced by itself after a backoff of 0.1 s
    doubling to 5 s; the claim loop keeps polling meanwhile. Callbacks run on the
    listener's thread and must be quick.

    Liveness: after ``liveness`` seconds without a notification (half the polling
    floor's max, at least 0.1 s) the listener sends ``SELECT 1``; a connection that does
    not answer within ``max(liveness, 1)`` seconds (a half-open socket: a peer or a
    middlebox that went silent without closing) is cut and replaced. :meth:`stop` does
    not wait on such a socket either: it cuts it from the stopping thread.

    Counters: :attr:`received` (notifications seen, any schema), :attr:`connects`,
    :attr:`pings` (liveness checks sent).
    """

    THREAD_NAME = "cyclone-listener"

    def __init__(
        self,
        db: Database,
        logger: Logger,
        *,
        on_available: Callable[[list[str]], None],
        on_run_done: Callable[[list[str]], None],
        on_connected: Callable[[], None],
        liveness: float = 0.5,
    ) -> None:
        self._db = db
        self._log = logger
        self._on_available = on_available
        self._on_run_done = on_run_done
        self._on_connected = on_connected
        self._liveness = max(_LIVENESS_MIN_S, liveness)
        self._ping_timeout = max(self._liveness, _PING_TIMEOUT_MIN_S)
        self._stop = threading.Event()
        self.ready = threading.Event()
        """Set while the connection is LISTENing."""
        self.backend_pid: int | None = None
        """The Postgres backend pid of the LISTEN connection while connected."""
        self.received = 0
        self.connects = 0
        self.pings = 0
        self._thread: threading.Thread | None = None
        self._conn_lock = threading.Lock()
        self._conn: Conn | None = None  # the connection the thread holds, under _conn_lock

    def start(self) -> None:
        """Start the listener thread; returns at once (see :attr:`ready`)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.THREAD_NAME, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening and give the connection back to the pool (closed: its LISTENs
        go with it), within ``timeout`` seconds: the thread looks at its stop flag every
        0.25 s, and a thread still blocked on its socket after that has the socket cut
        under it."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            return
        deadline = time.monotonic() + max(0.0, timeout)
        thread.join(min(max(0.0, timeout), _STOP_GRACE_S))
        if thread.is_alive():
            with self._conn_lock:
                conn = self._conn
            if conn is not None:
                self._cut(conn)
            thread.join(max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        backoff = _RECONNECT_MIN_S
        pool = self._db.pool
        warned = False
        while not self._stop.is_set():
            try:
                conn = pool.getconn(timeout=_GETCONN_S)
            except Exception as exc:
                if not warned and not self._stop.is_set():
                    self._log.warning("listener: no connection (%s); polling meanwhile", exc)
                    warned = True
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _RECONNECT_MAX_S)
                continue
            with self._conn_lock:
                self._conn = conn
            try:
                conn.autocommit = True
                misc.notify_listen(Session(conn, self._db.q))
                self.backend_pid = conn.info.backend_pid
                self.connects += 1
                self.ready.set()
                backoff = _RECONNECT_MIN_S
                if warned:
                    self._log.warning("listener: listening again")
                warned = False
                self._on_connected()
                self._listen(conn)
            except Exception as exc:
                if not self._stop.is_set() and not warned:
                    self._log.warning(
                        "listener connection lost (%s); reconnecting in %.1fs, polling meanwhile",
                        str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc),
                        backoff,
                    )
                    warned = True
            finally:
                self.ready.clear()
                self.backend_pid = None
                self._release(conn)
            if not self._stop.is_set():
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _RECONNECT_MAX_S)

    def _listen(self, conn: Conn) -> None:
        """Dispatch notifications until stopped; ping after ``liveness`` quiet seconds.
        Raises the psycopg error of a connection that broke or did not answer."""
        quiet_since = time.monotonic()
        while not self._stop.is_set():
            for note in conn.notifies(timeout=min(_LISTEN_POLL_S, self._liveness)):
                quiet_since = time.monotonic()
                self._dispatch(note.channel, note.payload)
            if not self._stop.is_set() and time.monotonic() - quiet_since >= self._liveness:
                self._ping(conn)
                quiet_since = time.monotonic()

    def _ping(self, conn: Conn) -> None:
        self.pings += 1
        watchdog = threading.Timer(self._ping_timeout, self._cut, args=(conn,))
        watchdog.daemon = True
        watchdog.start()
        try:
            misc.notify_ping(Session(conn, self._db.q))
        finally:
            watchdog.cancel()

    def _cut(self, conn: Conn) -> None:
        """Shut ``conn``'s socket down (from another thread) so that whatever blocks on it
        returns with an error; a no-op once the listener let go of it."""
        with self._conn_lock:
            if self._conn is not conn or conn.closed:
                return
            try:
                sock = socket.socket(fileno=os.dup(conn.fileno()))
            except (OSError, psycopg.Error):
                return
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            finally:
                sock.close()

    def _release(self, conn: Conn) -> None:
        # Closed rather than UNLISTENed: a broken or silent connection cannot be trusted
        # with a round trip, and closing drops its LISTENs; the pool replaces it (without
        # its warning about a closed connection: the listener closed it on purpose).
        with self._conn_lock:
            self._conn = None
            close_and_return(self._db.pool, conn)

    def _dispatch(self, channel: str, payload: str) -> None:
        self.received += 1
        names = decode(channel, payload, self._db.schema)
        if not names:
            return
        try:
            if channel == CHANNEL_AVAILABLE:
                self._on_available(names)
            else:
                self._on_run_done(names)
        except Exception:
            self._log.exception("listener: a wakeup callback failed")


class WakeupTracking:
    """The wakeups recorded per caller-owned connection between
    :meth:`Client.track_wakeups <cyclone_flow.Client.track_wakeups>` and
    :meth:`Client.publish_wakeups <cyclone_flow.Client.publish_wakeups>` (Engine Design:
    "A caller-owned transaction sends no notification"). Connections are held weakly: a
    connection closed and dropped without publishing takes its record with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_conn: weakref.WeakKeyDictionary[Conn, Wakeups] = weakref.WeakKeyDictionary()

    def track(self, conn: Conn) -> None:
        """Start recording for ``conn`` (a no-op when it is already tracked)."""
        with self._lock:
            self._by_conn.setdefault(conn, Wakeups())

    def record(self, conn: Conn, wakeups: Wakeups) -> bool:
        """Add ``wakeups`` to ``conn``'s record; False when ``conn`` is not tracked."""
        with self._lock:
            recorded = self._by_conn.get(conn)
            if recorded is None:
                return False
            recorded.merge(wakeups)
            return True

    def peek(self, conn: Conn) -> Wakeups | None:
        """A copy of ``conn``'s record, or None when it is not tracked."""
        with self._lock:
            recorded = self._by_conn.get(conn)
            if recorded is None:
                return None
            copy = Wakeups()
            copy.merge(recorded)
            return copy

    def take(self, conn: Conn) -> Wakeups | None:
        """Stop tracking ``conn`` and return its record (None when it was not tracked)."""
        with self._lock:
            return self._by_conn.pop(conn, None)


class WakeupTracker:
    """What :meth:`Client.track_wakeups <cyclone_flow.Client.track_wakeups>` returns: a
    handle on one connection's recorded wakeups, usable as a context manager.

    As a context manager, a clean exit publishes what was recorded (the caller's
    transaction must have committed inside the block) and an exception discards it::

        with client.track_wakeups(conn):
            with conn.transaction():
                client.submit_tx(conn, flow, {"order_id": 42})
        # committed, then published here

    Explicit calls work too: :meth:`publish` after the commit, :meth:`discard` after a
    rollback.
    """

    def __init__(self, conn: Conn, tracking: WakeupTracking, publish: Callable[[Conn], None]):
        self.conn = conn
        self._tracking = tracking
        self._publish = publish

    @property
    def wakeups(self) -> Wakeups:
        """A copy of what has been recorded so far (empty once published or discarded)."""
        return self._tracking.peek(self.conn) or Wakeups()

    def publish(self) -> None:
        """Publish the recorded wakeups now; see :meth:`Client.publish_wakeups
        <cyclone_flow.Client.publish_wakeups>` (raises TransactionOpenError before the
        commit)."""
        self._publish(self.conn)

    def discard(self) -> None:
        """Stop tracking and forget the recorded wakeups (after a rollback)."""
        self._tracking.take(self.conn)

    def __enter__(self) -> WakeupTracker:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self.publish()
        else:
            self.discard()


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
    each commit, the :class:`WakeupTracking` of caller-owned transactions, the one
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
        self.tracking = WakeupTracking()
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

"""The one LISTEN connection of a client, with reconnect and liveness pings (Engine
Design: LISTEN/NOTIFY and the Polling Floor; Client Options: WithNotify)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from logging import Logger

import psycopg

from cyclone_flow.db import notify
from cyclone_flow.db.conn import Conn, Database, Session
from cyclone_flow.db.pool import close_and_return
from cyclone_flow.notify.wakeups import CHANNEL_AVAILABLE, decode

_LISTEN_POLL_S = 0.25  # how often the listener looks at its stop flag while idle
_RECONNECT_MIN_S = 0.1
_RECONNECT_MAX_S = 5.0
_GETCONN_S = 1.0  # how long the listener waits for a pool connection at a time
_LIVENESS_MIN_S = 0.1  # the shortest quiet time after which the listener pings
_PING_TIMEOUT_MIN_S = 1.0  # a ping unanswered this long (or liveness) cuts the connection
_STOP_GRACE_S = 2 * _LISTEN_POLL_S  # stop() cuts a socket the thread is still blocked on


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
                notify.notify_listen(Session(conn, self._db.q))
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
            notify.notify_ping(Session(conn, self._db.q))
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

"""Publishing wakeups after the commit, coalesced or inline (Client Options:
WithNotifyCoalesce)."""

from __future__ import annotations

import logging
import threading
import time
from logging import Logger

from cyclone_flow.db import notify
from cyclone_flow.db.conn import Conn, Database, Session, autocommit
from cyclone_flow.db.errors import database_lost, prepared_statement_lost, warn_prepared_statements
from cyclone_flow.notify.wakeups import Wakeups, encode


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
                notify.notify_publish(
                    Session(pooled, self._db.q), channels=channels, payloads=payloads
                )
        else:
            with autocommit(conn):  # one round trip: no BEGIN/COMMIT around the pg_notify
                notify.notify_publish(
                    Session(conn, self._db.q), channels=channels, payloads=payloads
                )

"""Wakeups of caller-owned transactions: :class:`TrackedConnections` (the registry per
connection) and :class:`WakeupTracker` (the handle :meth:`Client.track_wakeups
<cyclone_flow.Client.track_wakeups>` returns); Engine Design: "A caller-owned transaction
sends no notification"."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from cyclone_flow.db.conn import Conn
from cyclone_flow.notify.wakeups import Wakeups


class TrackedConnections:
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

    def __init__(self, conn: Conn, tracking: TrackedConnections, publish: Callable[[Conn], None]):
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

"""Connections for the typed statements: :class:`Session` (a connection and the statements
qualified for one schema), :class:`Database` (a pool and those statements), pipelines and
autocommit, and :class:`Pending` (a statement sent now, read later); what kind of
database trouble an error is (:func:`conflict`; a lost database:
:func:`cyclone_flow.db.errors.database_lost`) and the bounded
retry of an engine transaction after a serialization failure or a deadlock
(:func:`retry_conflicts`).

Every engine transaction runs under READ COMMITTED whatever the database's or the role's
``default_transaction_isolation``: a connection checked out through :class:`Database`
(or passed to :func:`pin_read_committed`) starts its transactions with ``BEGIN ISOLATION
LEVEL READ COMMITTED`` (no extra round trip), and its first checkout sets the session's
characteristics to READ COMMITTED too (one round trip per physical connection), so that
the single statements the engine runs in autocommit (the claim, the reads of inputs) do
too. The engine's "every dependency completed" checks are only correct under READ
COMMITTED (Engine Design: CAS State Transitions).

Every function of :mod:`cyclone_flow.db` takes a session-like first argument (anything
with ``conn`` and ``q``: a :class:`Session`, or the engine's ``Tx``) and runs in whatever
transaction that connection is in; nothing in ``db`` commits, except that a connection
taken with :meth:`Database.session` commits when its block ends, as psycopg_pool's
``connection()`` does.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import psycopg
from psycopg.rows import RowFactory
from psycopg_pool import ConnectionPool

from cyclone_flow.db import queries
from cyclone_flow.db.errors import database_lost

Conn = psycopg.Connection[Any]
Statements = Mapping[str, str]
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

_PIPELINE = psycopg.Pipeline.is_supported()  # libpq >= 14 (the binary wheels bundle it)

READ_COMMITTED = psycopg.IsolationLevel.READ_COMMITTED

BEGIN_TRIES = 3
"""Most pool connections :meth:`Database.begin` tries when it finds them lost (at
checkout or at BEGIN) before it gives up."""

CONFLICT_RETRIES = 3
"""Most times :func:`retry_conflicts` runs a transaction that met a serialization failure
or a deadlock, the first run included."""

# the connections whose session characteristics are already READ COMMITTED
_pinned: weakref.WeakSet[Conn] = weakref.WeakSet()


def conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is a serialization failure (40001) or a deadlock (40P01): the
    transaction was rolled back and can run again at once."""
    return isinstance(exc, (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected))


def retry_conflicts(run: Callable[[], T], attempts: int = CONFLICT_RETRIES) -> T:
    """``run()`` (one whole transaction, begun and ended inside it), run again at once
    when it raised a serialization failure or a deadlock (:func:`conflict`), at most
    ``attempts`` times in all; raises the last such error, or any other one at once."""
    for left in range(attempts - 1, -1, -1):
        try:
            return run()
        except psycopg.Error as exc:
            if not left or not conflict(exc):
                raise
    raise AssertionError("unreachable")  # attempts < 1


def pin_read_committed(conn: Conn, q: Statements) -> Conn:
    """Make the transactions ``conn`` begins READ COMMITTED (``BEGIN ISOLATION LEVEL READ
    COMMITTED``: no round trip), and the first time this connection is seen, its
    session's characteristics too (``session_set_read_committed`` of ``q`` in autocommit, so
    that statements run in autocommit are READ COMMITTED as well); ``conn`` must be idle.
    Returns ``conn``; raises the psycopg error of that statement."""
    if conn.isolation_level is not READ_COMMITTED:
        conn.isolation_level = READ_COMMITTED
    if conn not in _pinned:
        with autocommit(conn):  # session.sql's statement, run here: db.session imports this module
            execute(Session(conn, q), "session_set_read_committed")
        _pinned.add(conn)
    return conn


class SessionLike(Protocol):
    """What every ``db`` function takes first: a connection and the qualified statements."""

    @property
    def conn(self) -> Conn: ...

    @property
    def q(self) -> Statements: ...


@dataclass(frozen=True)
class Session:
    """A connection (in whatever transaction state its owner left it) and the statements
    qualified for its schema."""

    conn: Conn
    q: Statements


@dataclass(frozen=True)
class Database:
    """A connection pool and the statements qualified for ``schema`` (a validated
    identifier): what a client, a worker or a maintenance service runs statements with."""

    pool: ConnectionPool[Any]
    schema: str
    q: Statements = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "q", queries.qualified(self.schema))

    @contextmanager
    def connection(self, *, wait: float | None = None) -> Iterator[Conn]:
        """A pool connection for the block, its transactions READ COMMITTED
        (:func:`pin_read_committed`); what it did commits when the block ends (rolls back
        on an exception), as psycopg_pool's ``connection()``. ``wait``: seconds to wait
        for a connection before ``PoolTimeout`` (None: the pool's timeout, 30 s)."""
        with self.pool.connection(timeout=wait) as conn:
            yield pin_read_committed(conn, self.q)

    def getconn(self) -> Conn:
        """A pool connection, its transactions READ COMMITTED, for :meth:`putconn`."""
        conn = self.pool.getconn()
        try:
            return pin_read_committed(conn, self.q)
        except BaseException:
            self.pool.putconn(conn)
            raise

    def putconn(self, conn: Conn) -> None:
        """Give back a connection of :meth:`getconn` or :meth:`begin` (a broken one is
        replaced)."""
        self.pool.putconn(conn)

    def begin(self) -> tuple[Conn, psycopg.Transaction]:
        """A pool connection (READ COMMITTED) inside a transaction block (its BEGIN sent)
        and that block, for a transaction that spans calls: end the block with its
        ``__exit__`` and give the connection back with :meth:`putconn`.

        A connection found lost at checkout or at BEGIN (e.g. one a restart of the server
        killed: nothing ran on it yet) goes back to the pool, which replaces it; the
        pool's idle connections are checked (the restart killed them too) and BEGIN is
        tried on another one, up to :data:`BEGIN_TRIES` connections. Raises the last
        psycopg error (or the pool's ``PoolTimeout`` while the database is down)."""
        for left in range(BEGIN_TRIES - 1, -1, -1):
            conn = self.pool.getconn()
            try:
                pin_read_committed(conn, self.q)
                tx = conn.transaction()
                tx.__enter__()
                return conn, tx
            except BaseException as exc:
                self.pool.putconn(conn)
                if not left or not database_lost(exc):
                    raise
            self.pool.check()
        raise AssertionError("unreachable")  # BEGIN_TRIES < 1

    @contextmanager
    def transaction(self, after: Callable[[Conn], None] | None = None) -> Iterator[Conn]:
        """A pool connection inside a READ COMMITTED transaction for the block
        (:meth:`begin`: a connection lost before BEGIN is replaced), committed when the
        block ends (rolled back when it raises); then ``after(conn)`` on the idle
        connection before it goes back to the pool (work after the commit, such as
        publishing wakeups on it). Raises what the block, the COMMIT or ``after`` raised.
        """
        conn, tx = self.begin()
        try:
            try:
                yield conn
            except BaseException as exc:
                if not tx.__exit__(type(exc), exc, exc.__traceback__):
                    raise
                return
            tx.__exit__(None, None, None)
            if after is not None:
                after(conn)
        finally:
            self.pool.putconn(conn)

    @contextmanager
    def session(self, *, wait: float | None = None) -> Iterator[Session]:
        """A pool connection for the block (READ COMMITTED); what it did commits when the
        block ends (rolls back on an exception), as psycopg_pool's ``connection()``.
        ``wait`` as for :meth:`connection`."""
        with self.connection(wait=wait) as conn:
            yield Session(conn, self.q)

    @contextmanager
    def autocommit_session(self) -> Iterator[Session]:
        """A pool connection in autocommit for the block's single statement: one round
        trip, no BEGIN/COMMIT around it."""
        with self.connection() as conn, autocommit(conn):
            yield Session(conn, self.q)


def pipelined(conn: Conn) -> AbstractContextManager[Any]:
    """Send the block's statements in one network round trip (psycopg pipeline mode).

    They execute in order in the caller's transaction; their results are read after the
    block (:meth:`Pending.result`). A database error of any of them is raised when the
    block ends (the first one; the statements after it are skipped and the transaction is
    failed, as after a statement sent alone), and the connection has left pipeline mode by
    then. Without pipeline support in libpq, the statements go one by one."""
    return conn.pipeline() if _PIPELINE else nullcontext()


@contextmanager
def autocommit(conn: Conn) -> Iterator[None]:
    """Run the block's single statement in autocommit on an idle ``conn``, then restore."""
    if conn.autocommit:
        yield
        return
    conn.autocommit = True
    try:
        yield
    finally:
        if not conn.closed:
            conn.autocommit = False


class Pending(Generic[T_co]):
    """A statement sent (inside :func:`pipelined`, or at once outside it) whose rows are
    read later: :meth:`result` fetches and maps them, after the pipeline block ended."""

    __slots__ = ("_cursor", "_read")

    def __init__(self, cursor: psycopg.Cursor[Any], read: Callable[[psycopg.Cursor[Any]], T_co]):
        self._cursor = cursor
        self._read = read

    def result(self) -> T_co:
        """The statement's rows, mapped (raises the statement's psycopg error, if any)."""
        return self._read(self._cursor)


def one(cursor: psycopg.Cursor[T]) -> T | None:
    """The first row of ``cursor``, or None."""
    return cursor.fetchone()


def every(cursor: psycopg.Cursor[T]) -> list[T]:
    """Every row of ``cursor``."""
    return cursor.fetchall()


def nothing(cursor: psycopg.Cursor[Any]) -> None:
    """Read nothing (a statement sent for its effect)."""
    return None


def execute(
    s: SessionLike, name: str, params: Mapping[str, Any] | None = None
) -> psycopg.Cursor[Any]:
    """Send the named statement ``name`` with ``params`` on ``s.conn``; rows are tuples
    (read them only inside :mod:`cyclone_flow.db`)."""
    return s.conn.execute(s.q[name], params)


def execute_rows(
    s: SessionLike, name: str, params: Mapping[str, Any] | None, rows: RowFactory[T]
) -> psycopg.Cursor[T]:
    """Send the named statement ``name`` with ``params``; its rows come from ``rows`` (a
    :func:`cyclone_flow.db.rows.rows_of` factory)."""
    return s.conn.cursor(row_factory=rows).execute(s.q[name], params)

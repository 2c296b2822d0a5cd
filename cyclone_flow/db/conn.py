"""Connections for the typed statements: :class:`Session` (a connection and the statements
rendered for one schema), :class:`Database` (a pool and those statements), pipelines and
autocommit, and :class:`Pending` (a statement sent now, read later).

Every function of :mod:`cyclone_flow.db` takes a session-like first argument (anything
with ``conn`` and ``q``: a :class:`Session`, or the engine's ``Tx``) and runs in whatever
transaction that connection is in; nothing in ``db`` commits, except that a connection
taken with :meth:`Database.session` commits when its block ends, as psycopg_pool's
``connection()`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import psycopg
from psycopg.rows import RowFactory
from psycopg_pool import ConnectionPool

from cyclone_flow.db import queries

Conn = psycopg.Connection[Any]
Statements = Mapping[str, str]
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

_PIPELINE = psycopg.Pipeline.is_supported()  # libpq >= 14 (the binary wheels bundle it)


class SessionLike(Protocol):
    """What every ``db`` function takes first: a connection and the rendered statements."""

    @property
    def conn(self) -> Conn: ...

    @property
    def q(self) -> Statements: ...


@dataclass(frozen=True)
class Session:
    """A connection (in whatever transaction state its owner left it) and the statements
    rendered for its schema."""

    conn: Conn
    q: Statements


@dataclass(frozen=True)
class Database:
    """A connection pool and the statements rendered for ``schema`` (a validated
    identifier): what a client, a worker or a maintenance service runs statements with."""

    pool: ConnectionPool[Any]
    schema: str
    q: Statements = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "q", queries.render(self.schema))

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A pool connection for the block; what it did commits when the block ends (rolls
        back on an exception), as psycopg_pool's ``connection()``."""
        with self.pool.connection() as conn:
            yield Session(conn, self.q)

    @contextmanager
    def autocommit_session(self) -> Iterator[Session]:
        """A pool connection in autocommit for the block's single statement: one round
        trip, no BEGIN/COMMIT around it."""
        with self.pool.connection() as conn, autocommit(conn):
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

"""Migrated schemas reused from test to test (River's ``riverdbtest`` model).

Migrating a schema costs 30-150 ms on the embedded server (the new relation files and,
with fsync on, their syncs), dropping it 20 ms more; the suite used to pay both for every
test. The pool migrates a few schemas once and hands each test one in the state a fresh
migration leaves. When a test is done with a schema (:meth:`SchemaPool.release`):

1. Sessions of the test still open (every connection of the suite, and of the worker and
   CLI processes it starts, carries the suite's ``application_name``): the schema is
   never reused (it is dropped at the end of the session), so a leaked client or process
   cannot act on a later test's rows.
2. Objects the test created in the default schemas of a plain connection (``public``),
   e.g. a business table of an example handler: dropped, before the next test starts.

The rest is done by a cleaner thread on its own connection while the next test runs on
another schema of the pool:

3. Objects the test created in the schema (a ``ledger`` table through the ``db``
   fixture's search_path, a trigger on an engine table): dropped; then the schema's
   catalog description (:mod:`helpers.catalog`) must equal the one the migration left,
   else the schema is dropped and a freshly migrated one takes its place.
4. The engine's rows: every table written since the last reset (its total size grew) is
   truncated (``TRUNCATE ... RESTART IDENTITY CASCADE``) and every sequence set back to
   its start. Truncating, not deleting: a new table file gives the next test the
   physical row order of a fresh table, which queries without ORDER BY (and tests of
   them) see; deleted rows would leave their slots to be reused in another order. A
   truncate costs 10-70 ms (a new file per table and index), nearly a migration: hence
   the thread. The written tables' activity counters are zeroed (else autovacuum would
   analyze a reused table in the middle of some later test), and a schema whose tables
   have planner statistics (an ANALYZE, explicit or autovacuum's) is replaced: a truncate
   keeps them, and they change plans (the order of an UPDATE ... RETURNING, say).

Advisory locks and LISTEN belong to sessions, which step 1 guarantees are gone."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from cyclone_flow.db.migrate import migrate
from helpers.catalog import Entry, describe_schema

# How long release() waits for the sessions of a finished test to end (a closed or killed
# client's backend exits a few milliseconds after its socket closes).
SESSION_GRACE_S = 0.5
# The longest the pool's statements wait for a lock (one a leaked session holds, say);
# a schema whose cleaning times out is not reused.
LOCK_TIMEOUT = "5s"

# The droppable objects of some schemas: one row per object with the object type of its
# DROP statement, its qualified name (functions: with argument types) and, for a trigger,
# its table. Implicit objects (row and array types, a table's indexes and sequences) go
# with their owner (IF EXISTS ... CASCADE).
_OBJECTS = """
SELECT c.oid, CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                             WHEN 'S' THEN 'SEQUENCE' WHEN 'f' THEN 'FOREIGN TABLE'
                             WHEN 'c' THEN 'TYPE' WHEN 'i' THEN 'INDEX' WHEN 'I' THEN 'INDEX'
                             ELSE 'TABLE' END,
       format('%%I.%%I', n.nspname, c.relname), NULL
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY (%(nsps)s) AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'c', 'i', 'I')
UNION ALL
SELECT p.oid, CASE p.prokind WHEN 'p' THEN 'PROCEDURE' WHEN 'a' THEN 'AGGREGATE'
                             ELSE 'FUNCTION' END,
       format('%%I.%%I(%%s)', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid)),
       NULL
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = ANY (%(nsps)s)
UNION ALL
SELECT t.oid, CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END,
       format('%%I.%%I', n.nspname, t.typname), NULL
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = ANY (%(nsps)s) AND t.typrelid = 0
  AND NOT EXISTS (SELECT 1 FROM pg_type e WHERE e.typarray = t.oid)
UNION ALL
SELECT g.oid, 'TRIGGER', quote_ident(g.tgname), format('%%I.%%I', n.nspname, c.relname)
FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY (%(nsps)s) AND NOT g.tgisinternal
"""
# The order in which a test's objects are dropped (dependents first; CASCADE and IF EXISTS
# cover the rest).
_DROP_ORDER = (
    "TRIGGER",
    "VIEW",
    "MATERIALIZED VIEW",
    "FOREIGN TABLE",
    "TABLE",
    "INDEX",
    "SEQUENCE",
    "AGGREGATE",
    "PROCEDURE",
    "FUNCTION",
    "DOMAIN",
    "TYPE",
)


@dataclass(frozen=True)
class _Object:
    oid: int
    type: str  # the object type of its DROP statement
    name: str  # qualified name (functions: with their argument types)
    table: str | None  # a trigger's table


@dataclass
class _Schema:
    """What the pool knows about one of its schemas."""

    name: str
    own: frozenset[int]  # oids of its objects after the migration
    sizes: dict[str, int]  # its tables' total sizes after the last reset
    outside: frozenset[int] = frozenset()  # oids in ``public`` when its test began


class SchemaPool:
    """Hands out migrated schemas (:meth:`acquire`) and takes them back (:meth:`release`);
    :meth:`close` drops them all.

    ``database_url`` is the suite's server; ``app_name`` the ``application_name`` every
    session of the suite carries (``PGAPPNAME``), by which release() sees sessions a test
    left open. At most ``size`` schemas exist at a time (one in use, others being cleaned
    or ready). Raises, from acquire(), what the cleaner thread raised.
    """

    def __init__(self, database_url: str, app_name: str, size: int = 3) -> None:
        self.database_url = database_url
        self.app_name = app_name
        self.size = size
        self.counts: Counter[str] = Counter()
        self._baseline: list[Entry] | None = None
        self._made: list[str] = []  # every schema ever made, for close()
        self._live = 0  # schemas in use, being cleaned or ready
        self._ready: list[_Schema] = []
        self._dirty: list[_Schema] = []
        self._leased: dict[str, _Schema] = {}
        self._error: BaseException | None = None
        self._closing = False
        self._can_reset = True  # pg_stat_reset_single_table_counters allowed
        self._cond = threading.Condition()
        self._conn = self._connect()  # the test thread's
        self._cleaner = threading.Thread(target=self._clean_loop, name="schema-pool", daemon=True)
        self._cleaner.start()

    # -- the test thread ---------------------------------------------------------------

    def acquire(self) -> str:
        """A migrated schema with no rows (``cyclone_schema_version`` aside)."""
        with self._cond:
            while not self._ready and self._live >= self.size and self._error is None:
                self._cond.wait()
            self._raise_error()
            entry = self._ready.pop() if self._ready else None
            if entry is None:
                self._live += 1
        if entry is None:
            entry = self._migrate(self._conn)
        else:
            self._count("reused")
        entry.outside = frozenset(o.oid for o in self._objects(self._conn, None))
        self._leased[entry.name] = entry
        return entry.name

    def release(self, name: str) -> None:
        """Take ``name`` back after its test (steps 1 and 2 of the module docstring now,
        the rest in the cleaner thread)."""
        entry = self._leased.pop(name)
        leaked = self._sessions_left(self._conn)
        try:
            self._drop_new(self._conn, self._objects(self._conn, None), entry.outside, "public")
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
            leaked = True  # a session still holds a lock on public: unsafe to go on
        with self._cond:
            if leaked:
                self.counts["discarded (sessions left open)"] += 1
                self._live -= 1  # dropped by close(), once those sessions are gone
            else:
                self._dirty.append(entry)
            self._cond.notify_all()

    def settle(self) -> None:
        """Wait until the cleaner thread has nothing left to do."""
        with self._cond:
            while self._dirty and self._error is None:
                self._cond.wait()
            self._raise_error()

    def close(self) -> None:
        """Stop the cleaner, drop every schema the pool made (best effort: one a leaked
        session still holds stays) and close the connections."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._cleaner.join(timeout=60)
        for name in self._made:
            with contextlib.suppress(psycopg.Error):
                self._drop_schema(self._conn, name)
        self._conn.close()

    def summary(self) -> str:
        """One line of counts for the end of the session."""
        with self._cond:
            parts = [f"{n} {what}" for what, n in sorted(self.counts.items())]
        return "schema pool: " + ", ".join(parts)

    # -- the cleaner thread ------------------------------------------------------------

    def _clean_loop(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        try:
            conn = self._connect()
            while True:
                with self._cond:
                    while not self._dirty and not self._closing:
                        self._cond.wait()
                    if self._closing:
                        return  # close() drops the schemas anyway
                    entry = self._dirty[0]
                clean = self._clean(conn, entry)
                with self._cond:
                    self._dirty.pop(0)
                    if clean is None:
                        self._live -= 1
                    else:
                        self._ready.append(clean)
                    self._cond.notify_all()
        except BaseException as exc:  # surfaced by the next acquire() or settle()
            with self._cond:
                self._error = exc
                self._cond.notify_all()
        finally:
            if conn is not None:
                conn.close()

    def _clean(self, conn: psycopg.Connection[Any], entry: _Schema) -> _Schema | None:
        """Steps 3 and 4: ``entry`` ready for a test, or its replacement, or None (not
        reused: a lock timed out)."""
        try:
            self._drop_new(conn, self._objects(conn, entry.name), entry.own, "schema")
            if describe_schema(conn, entry.name) != self._baseline:
                return self._replace(conn, entry, "schema changed")
            written = self._truncate(conn, entry)
            if written and not self._reset_counters(conn, entry.name):
                return self._replace(conn, entry, "written, counters not resettable")
            if self._has_statistics(conn, entry.name):
                return self._replace(conn, entry, "planner statistics")
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
            self._count("discarded (lock timeout)")
            return None
        return entry

    def _replace(self, conn: psycopg.Connection[Any], entry: _Schema, why: str) -> _Schema:
        self._count(f"replaced ({why})")
        self._drop_schema(conn, entry.name)
        return self._migrate(conn)

    def _truncate(self, conn: psycopg.Connection[Any], entry: _Schema) -> bool:
        """Truncate the tables of ``entry`` written since the last reset (a table's total
        size, indexes included, grows with the first row written to it and only a
        truncate brings it back), then set every sequence back to its start (a failed
        insert takes a value without leaving a row). True when a table was written."""
        sizes = self._table_sizes(conn, entry.name)
        written = [t for t, size in sizes.items() if size != entry.sizes.get(t)]
        if written:
            conn.execute(
                sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
                    sql.SQL(", ").join(sql.Identifier(entry.name, t) for t in written)
                )
            )
            entry.sizes = self._table_sizes(conn, entry.name)
        conn.execute(
            "SELECT setval(s.seqrelid, s.seqstart, false) FROM pg_sequence s"
            " JOIN pg_class c ON c.oid = s.seqrelid WHERE c.relnamespace = to_regnamespace(%s)",
            (entry.name,),
        )
        return bool(written)

    def _reset_counters(self, conn: psycopg.Connection[Any], name: str) -> bool:
        """Zero the activity counters of the tables of ``name``, as a new table's: else
        the changes of earlier tests add up until autovacuum analyzes a table in the
        middle of some test (changing its plans), which a fresh schema would not see.
        False when the server does not let this role (not a superuser) do it."""
        if not self._can_reset:
            return False
        try:
            conn.execute(
                "SELECT pg_stat_reset_single_table_counters(oid) FROM pg_class"
                " WHERE relnamespace = to_regnamespace(%s) AND relkind IN ('r', 'p')",
                (name,),
            )
        except psycopg.errors.InsufficientPrivilege:
            self._can_reset = False
        return self._can_reset

    @staticmethod
    def _has_statistics(conn: psycopg.Connection[Any], name: str) -> bool:
        """True when a table of ``name`` has planner statistics (an ANALYZE, the test's or
        autovacuum's): a truncate keeps them, and they change the plans of later tests."""
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stats WHERE schemaname = %s)", (name,)
        ).fetchone()
        return bool(row and row[0])

    # -- both threads ------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        # its own application_name: the pool's sessions are not a test's leftovers
        conn = psycopg.connect(
            self.database_url, autocommit=True, application_name=f"{self.app_name}-pool"
        )
        conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
        # no NOTICEs ("truncate cascades to ..."): psycopg would log them, from the
        # cleaner thread into whatever test runs then
        conn.execute("SET client_min_messages = warning")
        return conn

    def _count(self, what: str) -> None:
        with self._cond:
            self.counts[what] += 1

    def _raise_error(self) -> None:
        if self._error is not None:
            raise RuntimeError("the schema pool's cleaner failed") from self._error

    def _migrate(self, conn: psycopg.Connection[Any]) -> _Schema:
        name = f"t_{uuid.uuid4().hex[:12]}"
        with self._cond:
            self._made.append(name)
        migrate(conn, name)
        self._count("migrated")
        entry = _Schema(
            name,
            frozenset(o.oid for o in self._objects(conn, name)),
            self._table_sizes(conn, name),
        )
        description = describe_schema(conn, name)
        with self._cond:
            if self._baseline is None:
                self._baseline = description
        assert description == self._baseline, "two migrations of one code built different schemas"
        return entry

    def _sessions_left(self, conn: psycopg.Connection[Any]) -> bool:
        """True when sessions of the suite are still open after :data:`SESSION_GRACE_S`."""
        deadline = time.monotonic() + SESSION_GRACE_S
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                (self.app_name,),
            ).fetchone()
            if not row or not row[0]:
                return False
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.002)

    @staticmethod
    def _objects(conn: psycopg.Connection[Any], schema: str | None) -> list[_Object]:
        """The droppable objects of ``schema``, or (None) of the schemas a plain
        connection creates unqualified objects in (``current_schemas``: ``public``)."""
        if schema is None:
            row = conn.execute("SELECT current_schemas(false)").fetchone()
            nsps = list(row[0]) if row else []
        else:
            nsps = [schema]
        rows = conn.execute(_OBJECTS, {"nsps": nsps}).fetchall()
        return [_Object(*row) for row in rows]

    def _drop_new(
        self,
        conn: psycopg.Connection[Any],
        objects: list[_Object],
        keep: frozenset[int],
        where: str,
    ) -> None:
        new = sorted(
            (o for o in objects if o.oid not in keep), key=lambda o: _DROP_ORDER.index(o.type)
        )
        if not new:
            return
        self._count(f"cleaned ({where} objects dropped)")
        with conn.transaction():
            for obj in new:
                if obj.type == "TRIGGER":
                    stmt = f"DROP TRIGGER IF EXISTS {obj.name} ON {obj.table} CASCADE"
                else:
                    stmt = f"DROP {obj.type} IF EXISTS {obj.name} CASCADE"
                conn.execute(stmt.encode())

    @staticmethod
    def _table_sizes(conn: psycopg.Connection[Any], name: str) -> dict[str, int]:
        """``{table: pg_total_relation_size}`` of the tables of ``name`` but
        ``cyclone_schema_version`` (never emptied)."""
        rows = conn.execute(
            "SELECT relname, pg_total_relation_size(oid) FROM pg_class"
            " WHERE relnamespace = to_regnamespace(%s) AND relkind IN ('r', 'p')"
            " AND relname <> 'cyclone_schema_version'",
            (name,),
        ).fetchall()
        return {str(t): int(size) for t, size in rows}

    @staticmethod
    def _drop_schema(conn: psycopg.Connection[Any], name: str) -> None:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))

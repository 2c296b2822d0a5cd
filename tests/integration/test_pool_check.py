"""The pool's checkout check (:class:`cyclone_flow.db.pool.BrokenConnectionCheck`) on a
real server: a pooled connection whose backend was terminated is refused at its next
checkout (no statement fails on it), unless its previous checkout is more recent than
``recent_s``, when its socket is not looked at (the statement that uses it notices)."""

from __future__ import annotations

import time

import psycopg
import pytest

from cyclone_flow.db.pool import BrokenConnectionCheck, open_pool


def _terminate(url: str, conn: psycopg.Connection) -> None:
    pid = conn.info.backend_pid
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        # wait until the server's side is gone: its FATAL message is on the socket then
        deadline = time.monotonic() + 10
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, "the backend did not end"
            time.sleep(0.01)


def test_a_terminated_idle_connection_is_refused_at_checkout(database_url: str) -> None:
    pool = open_pool(database_url, min_size=1, max_size=1, name="check-refuse")
    try:
        check = pool._check
        assert isinstance(check, BrokenConnectionCheck)
        check.recent_s = 0.0  # every checkout looks at the socket
        with pool.connection() as conn:
            conn.execute("SELECT 1")
        _terminate(database_url, conn)
        with pool.connection() as again:  # a fresh connection, not the dead one
            assert again.execute("SELECT 1").fetchone() == (1,)
        assert check.refused == 1
    finally:
        pool.close()


def test_a_recently_checked_out_connection_is_not_looked_at(database_url: str) -> None:
    check = BrokenConnectionCheck(recent_s=3600.0)
    with psycopg.connect(database_url, autocommit=True) as conn:
        check(conn)  # the first checkout looks: the socket is quiet
        _terminate(database_url, conn)
        check(conn)  # within recent_s: not looked at, so not refused
        assert check.refused == 0
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")  # the statement that uses it notices
    check = BrokenConnectionCheck(recent_s=0.0)
    with psycopg.connect(database_url, autocommit=True) as conn:
        check(conn)
        _terminate(database_url, conn)
        with pytest.raises(psycopg.OperationalError, match="broken"):
            check(conn)
        assert check.refused == 1

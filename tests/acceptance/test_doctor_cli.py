"""``cyclone-flow doctor`` through the real CLI against a real Postgres: a
healthy schema exits 0; a session idle in transaction past the threshold is reported with
its pid, and a hot table with autovacuum disabled is reported, each with its fix (exit 1);
bad thresholds are usage errors (exit 2)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from helpers.cli import Runner, clean_env, json_output, no_traceback
from helpers.procs import wait_until

APP = "cyclone-doctor-test-idle"


def test_a_healthy_schema_exits_0(cli: Runner) -> None:
    done = cli("doctor")
    no_traceback(done)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "healthy: no warnings" in done.stdout
    report = json_output(cli("doctor", "--json").stdout)
    assert report["healthy"] is True and report["advice"] == []
    assert {t["table_name"] for t in report["tables"]} == {"cyclone_steps", "cyclone_runs"}
    assert report["schema_version"] == report["code_version"]
    assert report["claims"] and report["claims"][0]["queue"] == "default"


@pytest.fixture
def idle_in_transaction(database_url: str, schema: str) -> Iterator[int]:
    """A session idle in a REPEATABLE READ transaction that read cyclone_steps (so it holds
    a snapshot, as an analytics query does): its pid."""
    with psycopg.connect(database_url, application_name=APP) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute(f'SELECT count(*) FROM "{schema}".cyclone_steps')
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        yield int(row[0])
        conn.rollback()


def test_an_idle_in_transaction_session_past_the_threshold_is_reported_with_its_pid(
    cli: Runner, idle_in_transaction: int, db: psycopg.Connection[Any]
) -> None:
    pid = idle_in_transaction
    wait_until(  # older than the threshold, by the database's clock
        lambda: (
            db.execute(
                "SELECT now() - xact_start > interval '200 ms' FROM pg_stat_activity"
                " WHERE pid = %s",
                [pid],
            ).fetchone()
            == (True,)
        ),
        what="the transaction to age",
    )
    done = cli("doctor", "--json", "--xact-age", "200ms")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json_output(done.stdout)
    [advice] = [a for a in report["advice"] if a["subject"] == f"pid {pid}"]
    assert advice["check"] == "open_transaction"
    assert APP in advice["message"] and "prevents vacuum of cyclone_steps" in advice["message"]
    assert f"pg_terminate_backend({pid})" in advice["fix"]
    [held] = [t for t in report["transactions"] if t["pid"] == pid]
    assert held["holds_xmin"] is True and held["state"] == "idle in transaction"
    text = cli("doctor", "--xact-age", "200ms")
    assert text.returncode == 1 and f"pid {pid}" in text.stdout and "fix:" in text.stdout
    # under the default threshold (5 minutes) the same session is not a warning
    assert cli("doctor").returncode == 0


def test_a_table_with_autovacuum_disabled_is_reported(
    cli: Runner, db: psycopg.Connection[Any], schema: str
) -> None:
    db.execute("ALTER TABLE cyclone_steps SET (autovacuum_enabled = false)")
    try:
        done = cli("doctor", "--json")
        assert done.returncode == 1, done.stdout + done.stderr
        report = json_output(done.stdout)
        [advice] = [a for a in report["advice"] if a["check"] == "autovacuum"]
        assert advice["subject"] == "cyclone_steps"
        assert "autovacuum is off" in advice["message"]
        assert f"ALTER TABLE {schema}.cyclone_steps RESET (autovacuum_enabled)" in advice["fix"]
        [steps] = [t for t in report["tables"] if t["table_name"] == "cyclone_steps"]
        assert steps["autovacuum_enabled"] is False
    finally:
        db.execute("ALTER TABLE cyclone_steps RESET (autovacuum_enabled)")
    assert cli("doctor").returncode == 0


@pytest.mark.parametrize(
    "args",
    [("--xact-age", "soon"), ("--dead-ratio", "2"), ("--reclaims", "-1")],
)
def test_bad_thresholds_are_usage_errors(cli: Runner, args: tuple[str, str]) -> None:
    done = cli("doctor", *args)
    no_traceback(done)
    assert done.returncode == 2 and "error:" in done.stderr


SCAN_ONLY = "-c enable_indexscan=off -c enable_bitmapscan=off"


def test_a_scan_of_a_small_table_is_said_to_be_no_problem(cli: Runner) -> None:
    """A planner that does not walk the claim index (here: told not to; on a small table it
    chooses so itself) costs the claim of the tiny table below the threshold: doctor says
    a scan is cheaper, not "NO", and it is no warning (exit 0)."""
    done = cli("doctor", env=clean_env(PGOPTIONS=SCAN_ONLY))
    no_traceback(done)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("claim of queue default"))
    assert "claim index used: no: a scan is cheaper on a table this small (cost " in line, line
    assert "NO" not in line


def test_the_oldest_xmin_holder_is_reported_below_the_threshold_and_warned_above(
    cli: Runner, idle_in_transaction: int, db: psycopg.Connection[Any]
) -> None:
    """The transaction holding the xmin horizon is reported with its pid
    whatever its age; a warning comes only past --xact-age."""
    pid = idle_in_transaction
    young = cli("doctor", "--json")  # under the default threshold (5 minutes)
    assert young.returncode == 0, young.stdout + young.stderr
    report = json_output(young.stdout)
    holder = report["oldest_xmin_holder"]
    assert holder is not None and holder["pid"] == pid
    assert (holder["application_name"], holder["state"]) == (APP, "idle in transaction")
    assert holder["holds_xmin"] is True and holder["query_start"] is not None
    assert report["advice"] == [] and report["transactions"] == []
    text = cli("doctor")
    no_traceback(text)
    assert text.returncode == 0, text.stdout + text.stderr
    line = next(x for x in text.stdout.splitlines() if x.startswith("oldest transaction"))
    assert f"(pid {pid}, application {APP}, idle in transaction, query started " in line, line
    assert "warning [" not in text.stdout and "healthy: no warnings" in text.stdout
    wait_until(  # older than a tiny threshold, by the database's clock
        lambda: (
            db.execute(
                "SELECT now() - xact_start > interval '50 ms' FROM pg_stat_activity WHERE pid = %s",
                [pid],
            ).fetchone()
            == (True,)
        ),
        what="the transaction to age",
    )
    old = cli("doctor", "--json", "--xact-age", "50ms")
    assert old.returncode == 1, old.stdout + old.stderr
    report = json_output(old.stdout)
    assert report["oldest_xmin_holder"]["pid"] == pid
    assert [a["subject"] for a in report["advice"] if a["check"] == "open_transaction"] == [
        f"pid {pid}"
    ]


def test_one_live_worker_is_counted_in_the_singular(cli: Runner, make_client: Any) -> None:
    """The count of live workers agrees with its noun: "1 live worker", "2 live workers"."""
    make_client(workers=1, worker_queues={"doctor-one": 1}).start()
    wait_until(
        lambda: json_output(cli("workers", "--json").stdout), timeout=30, what="a worker row"
    )
    done = cli("doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert ", 1 live worker\n" in done.stdout, done.stdout
    make_client(workers=1, worker_queues={"doctor-two": 1}).start()
    wait_until(
        lambda: len(json_output(cli("workers", "--json").stdout)) == 2,
        timeout=30,
        what="two worker rows",
    )
    assert ", 2 live workers\n" in cli("doctor").stdout

"""``cyclone-flow worker`` at start-up through the real CLI (breaker findings, task cli27):
on a schema that is not migrated (none, or older than the code) it exits 2 with one
error naming the schema, its version, the code's and the migrate command to run; under
``--processes N`` the supervisor says so once and starts no worker (rather than restart
each child forever, one error per restart); and only the supervisor says which database
is used, not each child."""

from __future__ import annotations

import shlex
import urllib.parse
import uuid
from typing import Any

import pytest
from helpers.cli import WORKER, clean_env, no_traceback, run_cli

from cyclone_flow.db.migrate import latest_version


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def _shown(url: str) -> str:
    """The test database's URL as the migrate hint shows it (it has no password)."""
    return shlex.quote(url)


def test_a_worker_on_a_schema_never_migrated_exits_2_saying_what_to_run(
    database_url: str,
) -> None:
    bare = f"unmigrated_{uuid.uuid4().hex[:10]}"
    proc = run_cli(*WORKER, "--database-url", database_url, "--schema", bare, timeout=60)
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    if urllib.parse.urlsplit(database_url).password:
        pytest.skip("the test database's URL has a password: the hint hides it")
    assert _errors(proc.stderr) == [
        f"error: database schema {bare!r} is at version 0 (never migrated), this cyclone-flow "
        f"needs version {latest_version()}: run `cyclone-flow migrate --database-url "
        f"{_shown(database_url)} --schema {bare}` first; the worker did not start"
    ], proc.stderr
    # the URL from the environment: `cyclone-flow migrate` reads it there too
    env = clean_env(CYCLONE_DATABASE_URL=database_url, CYCLONE_SCHEMA=bare)
    from_env = run_cli(*WORKER, env=env, timeout=60)
    assert from_env.returncode == 2, from_env.stderr
    [error] = _errors(from_env.stderr)
    assert error.endswith(
        f"run `cyclone-flow migrate --schema {bare}` first; the worker did not start"
    ), error


@pytest.fixture
def outdated(db: Any) -> Any:
    """The test's schema with its newest migration's row taken out (an older schema, as
    after deploying new code before running migrate); put back after."""
    row = db.execute(
        "DELETE FROM cyclone_schema_version WHERE version = "
        "(SELECT max(version) FROM cyclone_schema_version) RETURNING version, name"
    ).fetchone()
    yield row[0]
    db.execute("INSERT INTO cyclone_schema_version (version, name) VALUES (%s, %s)", row)


def test_processes_on_an_older_schema_say_it_once_and_exit_2_without_restarts(
    database_url: str, schema: str, outdated: int
) -> None:
    proc = run_cli(
        *WORKER, "--processes", "3", "--database-url", database_url, "--schema", schema,
        timeout=60,
    )  # fmt: skip
    no_traceback(proc)
    assert proc.returncode == 2, proc.stderr
    [error] = _errors(proc.stderr)
    assert (
        f"database schema {schema!r} is at version {outdated - 1}, this cyclone-flow needs "
        f"version {outdated}: run `cyclone-flow migrate --database-url " in error
    ), error
    assert error.endswith(f"--schema {schema}` first; the worker did not start"), error
    assert "restarting" not in proc.stderr and "processes: started" not in proc.stderr
    assert proc.stderr.count("cyclone-flow: using database") == 1, proc.stderr


def test_only_the_supervisor_says_which_database_is_used(database_url: str, schema: str) -> None:
    proc = run_cli(
        *WORKER, "--processes", "2", "--database-url", database_url, "--schema", schema,
        timeout=120,
    )  # fmt: skip
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    assert "processes: every worker process exited" in proc.stderr, proc.stderr
    assert proc.stderr.count("cyclone-flow: using database") == 1, proc.stderr


@pytest.mark.parametrize("reload", [False, True])
def test_a_missing_import_path_exits_2_naming_it(
    database_url: str, schema: str, tmp_path: Any, reload: bool
) -> None:
    """A typo in --import-path is a usage error, with and without --reload (whose file
    watcher must not die with a traceback: "No path was found")."""
    missing = str(tmp_path / "nonexistent")
    args = ["--reload"] if reload else []
    proc = run_cli(
        "worker",
        *args,
        "--allow-module",
        "nosuchpkg",
        "--import-path",
        missing,
        "--exit-when-idle",
        "--database-url",
        database_url,
        "--schema",
        schema,
        timeout=60,
    )
    no_traceback(proc)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert _errors(proc.stderr) == [
        f"error: invalid value for --import-path: {missing!r} does not exist"
    ], proc.stderr

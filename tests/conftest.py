"""Shared fixtures: a real Postgres for the whole session (the embedded pgserver, or
``CYCLONE_TEST_DATABASE_URL``), a migrated schema per test from a pool of reused schemas
(``helpers.schema_pool``: emptied and checked between tests), and clients that are shut
down after the test. Also the markers: ``db`` on every test that uses the database,
``chaos`` on every test under ``tests/chaos``, and ``jit_pg``: such a test runs twice,
on the session's server and on a cluster of Debian's packaged PostgreSQL with JIT on
(``helpers.debian_pg``; the embedded server has no JIT), ``pg_server`` telling which."""

from __future__ import annotations

import compileall
import os
import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.debian_pg import REQUIRE_ENV as REQUIRE_DEBIAN_PG
from helpers.debian_pg import DebianCluster, debian_bin
from helpers.schema_pool import SchemaPool

from cyclone_flow import Client

TESTS = Path(__file__).resolve().parent

_pool: SchemaPool | None = None
_jit_pool: SchemaPool | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="run long soak/chaos variants")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        if "database_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.db)
        if item.path.is_relative_to(TESTS / "chaos"):
            item.add_marker(pytest.mark.chaos)
        if "slow" in item.keywords and not config.getoption("--soak"):
            item.add_marker(skip)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``jit_pg`` runs on the session's server and on Debian's with JIT."""
    if metafunc.definition.get_closest_marker("jit_pg") is not None:
        metafunc.parametrize("pg_server", ["default", "debian_jit"])


def pytest_configure(config: pytest.Config) -> None:
    """Compile the bytecode of the package, the test handlers and the examples once, before
    any test (in the controller when xdist runs the suite): the hundreds of CLI and worker
    processes the suite starts then load it instead of compiling ~100 modules each, a
    third of a process's start, which they would do with ``PYTHONDONTWRITEBYTECODE`` set
    (it is on the machines that run the suite: the processes never write their bytecode).
    Python checks each ``.pyc`` against its source, so an edited module is compiled again."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller compiled already
        return
    for folder in (TESTS.parent / "cyclone_flow", TESTS / "handlers", TESTS.parent / "examples"):
        compileall.compile_dir(folder, quiet=1, workers=1)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_sessionstart(session: Any) -> None:
    """SIGTERM (``timeout``, a CI runner) stops the suite as Ctrl-C does: fixtures tear
    down, so the embedded Postgres is stopped instead of left running."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def _sendable(value: Any) -> Any:
    """``value`` (a serialized report: dicts, lists, strings) with every lone surrogate
    backslash-escaped: execnet sends strings as strict UTF-8."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_sendable(k): _sendable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_sendable(v) for v in value)
    return value


@pytest.hookimpl(wrapper=True)
def pytest_report_to_serializable(config: pytest.Config, report: Any) -> Any:
    """A report as an xdist worker sends it to the controller, its text escaped where it
    holds a lone surrogate (the hostile-input tests log such text; execnet cannot send it)."""
    data = yield
    return _sendable(data) if data is not None else None


_worker_summaries: list[str] = []  # the xdist workers' schema pool lines (controller)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In an xdist worker: hand the schema pool's line to the controller, which prints it."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and _pool is not None and _pool.counts:
        workeroutput["schema_pool"] = _pool.summary()
    if workeroutput is not None and _jit_pool is not None and _jit_pool.counts:
        workeroutput["jit_schema_pool"] = "Debian JIT server: " + _jit_pool.summary()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """In the xdist controller: keep the line a worker handed over (pytest_sessionfinish)."""
    for key in ("schema_pool", "jit_schema_pool"):
        line = getattr(node, "workeroutput", {}).get(key)
        if line:
            _worker_summaries.append(f"{node.gateway.id}: {line}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _pool is not None and _pool.counts:
        terminalreporter.write_line(_pool.summary())
    if _jit_pool is not None and _jit_pool.counts:
        terminalreporter.write_line("Debian JIT server: " + _jit_pool.summary())
    for line in sorted(_worker_summaries):
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def app_name() -> Iterator[str]:
    """The ``application_name`` (``PGAPPNAME``) of every session the suite opens from here
    on (in this process and in the worker and CLI processes it starts), by which the
    schema pool sees the sessions a test left open."""
    previous = os.environ.get("PGAPPNAME")
    os.environ["PGAPPNAME"] = f"cyclone-tests-{uuid.uuid4().hex[:8]}"
    try:
        yield os.environ["PGAPPNAME"]
    finally:
        if previous is None:
            os.environ.pop("PGAPPNAME", None)
        else:
            os.environ["PGAPPNAME"] = previous


@pytest.fixture(scope="session")
def session_database_url(app_name: str) -> Iterator[str]:
    """A URL of the session's Postgres: ``CYCLONE_TEST_DATABASE_URL`` or an embedded server."""
    url = os.environ.get("CYCLONE_TEST_DATABASE_URL")
    if url:
        yield url
        return
    import pgserver

    with tempfile.TemporaryDirectory(prefix="cyclone-test-pg-") as tmp:
        server = pgserver.get_server(Path(tmp) / "pgdata", cleanup_mode="stop")
        try:
            uri = server.get_uri()
            with psycopg.connect(uri, autocommit=True) as conn:
                max_conn = conn.execute("SHOW max_connections").fetchone()
            assert max_conn is not None
            yield uri
        finally:
            server.cleanup()


@pytest.fixture(scope="session")
def debian_jit_cluster(app_name: str) -> Iterator[DebianCluster]:
    """A cluster of Debian's packaged PostgreSQL with JIT on (``helpers.debian_pg``),
    started when a test first asks for it. Skips the test when the server is not
    installed, unless ``CYCLONE_REQUIRE_DEBIAN_PG`` is set (``.ci/run``): then it fails."""
    if debian_bin() is None:
        why = "Debian's postgresql (with llvmjit.so) is not installed: apt-get install postgresql"
        if os.environ.get(REQUIRE_DEBIAN_PG):
            pytest.fail(f"{why}, and {REQUIRE_DEBIAN_PG} is set (.ci/run)")
        pytest.skip(why)
    cluster = DebianCluster()
    try:
        assert cluster.jit_available, f"no JIT on {cluster.version}"
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_server() -> str:
    """The server of this test: ``default`` (the session's, ``session_database_url``), or
    ``debian_jit`` (``debian_jit_cluster``: tests marked ``jit_pg`` run on both)."""
    return "default"


@pytest.fixture
def database_url(pg_server: str, request: pytest.FixtureRequest) -> str:
    """A URL of a real Postgres: the session's (``CYCLONE_TEST_DATABASE_URL`` or an
    embedded server), or Debian's with JIT on in the ``debian_jit`` run of a ``jit_pg``
    test."""
    if pg_server == "debian_jit":
        cluster: DebianCluster = request.getfixturevalue("debian_jit_cluster")
        return cluster.url
    url: str = request.getfixturevalue("session_database_url")
    return url


@pytest.fixture(scope="session")
def session_schema_pool(session_database_url: str, app_name: str) -> Iterator[SchemaPool]:
    """The session's pool of migrated schemas (see ``helpers.schema_pool``)."""
    global _pool
    _pool = SchemaPool(session_database_url, app_name=app_name)
    yield _pool
    _pool.close()


@pytest.fixture(scope="session")
def debian_jit_schema_pool(
    debian_jit_cluster: DebianCluster, app_name: str
) -> Iterator[SchemaPool]:
    """The pool of migrated schemas on the Debian JIT cluster."""
    global _jit_pool
    _jit_pool = SchemaPool(debian_jit_cluster.url, app_name=app_name)
    yield _jit_pool
    _jit_pool.close()


@pytest.fixture
def schema_pool(pg_server: str, request: pytest.FixtureRequest) -> SchemaPool:
    """The pool of migrated schemas of this test's server (see ``helpers.schema_pool``)."""
    name = "debian_jit_schema_pool" if pg_server == "debian_jit" else "session_schema_pool"
    pool: SchemaPool = request.getfixturevalue(name)
    return pool


@pytest.fixture
def schema(schema_pool: SchemaPool) -> Iterator[str]:
    """A schema with every migration applied and no rows, this test's alone: taken from
    the pool, emptied (and checked, or replaced) after the test. Objects the test left in
    it or in ``public`` are dropped."""
    name = schema_pool.acquire()
    yield name
    schema_pool.release(name)


@pytest.fixture
def make_client(database_url: str, schema: str) -> Iterator[Callable[..., Client]]:
    """Build clients on the test's schema with short timings; all shut down after."""
    clients: list[Client] = []

    def factory(**options: Any) -> Client:
        opts: dict[str, Any] = {
            "schema": schema,
            "lease_ttl": 2.0,
            "poll_interval": (0.02, 0.2),
        }
        opts.update(options)
        client = Client(database_url, **opts)
        clients.append(client)
        return client

    yield factory
    for client in clients:
        client.shutdown(timeout=2.0)


@pytest.fixture
def db(database_url: str, schema: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection whose search_path is the test's schema."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        yield conn

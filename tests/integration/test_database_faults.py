"""What production does to a database: restarts under load and raised default
isolation levels, each on an embedded server of the test's own (``helpers.own_server``),
so the session's shared server is never restarted or reconfigured.

- Restarts (``pg_ctl restart -m fast``) while two clients run one-node flows with the
  default ``max_attempts: 1``, each step writing one ledger row in
  ``ctx.completion_tx()``: no run fails, none is lost or doubled (a connection the restart
  killed is never a failed attempt: Engine Design: Leases and Heartbeats), and every
  connection-level failure is one warning line (no traceback) counted by
  ``observe_database_errors``. ``--soak`` runs a longer version.
- A database whose ``default_transaction_isolation`` is ``repeatable read`` or
  ``serializable``: the diamond and a 50-parent fan-in finish every time (the engine pins
  READ COMMITTED on its transactions and sessions).
- A handler that changes the session's default isolation in its completion transaction
  fails its step permanently with :class:`~cyclone_flow.errors.IsolationLevelError`; one
  that runs ``SET TRANSACTION ISOLATION LEVEL`` there is refused by Postgres; nothing of
  either commits.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from cyclone_test_handlers.faults import LEDGER_DDL
from helpers.own_server import OwnServer, own_server
from helpers.procs import wait_until

from cyclone_flow import Client, IsolationLevelError, migrate
from cyclone_flow.db.errors import database_lost
from cyclone_flow.events import StepEvent
from cyclone_flow.flowfile import load_flow_text

SCHEMA = "faults"
ONE = load_flow_text(
    """
name: one_ledger
nodes:
  a: {call: "cyclone_test_handlers.faults:ledger"}
"""
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnServer]:
    """One server for this module's tests (each works in a database of its own)."""
    with own_server(tmp_path_factory.mktemp("own-server")) as srv:
        yield srv


@pytest.fixture
def url(server: OwnServer) -> str:
    """A fresh database of the module's server, this test's alone."""
    return server.create_database(f"t_{uuid.uuid4().hex[:12]}")


def _prepare(url: str) -> None:
    migrate(url, schema=SCHEMA)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {SCHEMA}")
        conn.execute(LEDGER_DDL)


def _client(url: str, **options: Any) -> Client:
    opts: dict[str, Any] = {
        "schema": SCHEMA,
        "lease_ttl": 1.0,
        "poll_interval": (0.02, 0.2),
        "allow_modules": ["cyclone_test_handlers"],
    }
    opts.update(options)
    return Client(url, **opts)


def _query(url: str, statement: str) -> list[tuple[Any, ...]]:
    """``statement`` on a fresh connection (retried while the server restarts)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f"SET search_path TO {SCHEMA}")
                return conn.execute(statement).fetchall()  # type: ignore[arg-type]
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Submitter(threading.Thread):
    """Submits runs of ``ONE`` as fast as ``pace_s`` allows until stopped; a submit that
    fails during a restart is simply not counted (the run may or may not exist: the test
    reads the runs from the database)."""

    def __init__(self, client: Client, pace_s: float, input: dict[str, Any]) -> None:
        super().__init__(name="submitter", daemon=True)
        self.client = client
        self.pace_s = pace_s
        self.input = input
        self.submitted = 0
        self.failed = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.client.submit(ONE, self.input)
                self.submitted += 1
            except Exception:
                self.failed += 1
                self._halt.wait(0.05)
            self._halt.wait(self.pace_s)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def _restarts_under_load(
    server: OwnServer,
    url: str,
    restarts: int,
    every_s: float,
    caplog: pytest.LogCaptureFixture,
    pace_s: float = 0.0,
) -> None:
    before = server.restarts
    _prepare(url)
    errors: Counter[str] = Counter()
    events: list[StepEvent] = []
    lock = threading.Lock()

    def on_database_error(where: str) -> None:
        with lock:
            errors[where] += 1

    def on_event(event: StepEvent) -> None:
        with lock:
            events.append(event)

    workers = [_client(url, workers=4, on_step_event=on_event) for _ in range(2)]
    submitter_client = _client(url)
    try:
        for client in workers:
            client.observe_database_errors(on_database_error)
            client.start()
        submitter = Submitter(
            submitter_client, pace_s=pace_s, input={"schema": SCHEMA, "sleep_s": 0.1}
        )
        with caplog.at_level(logging.WARNING, logger="cyclone_flow"):
            submitter.start()
            for _ in range(restarts):
                time.sleep(every_s)
                server.restart()
            time.sleep(every_s)
            submitter.stop()

            def settled() -> bool:
                rows = _query(url, "SELECT count(*) FROM cyclone_runs WHERE state = 'running'")
                return rows[0][0] == 0

            # a step left to its lease comes back after 1 s of TTL plus one sweep
            wait_until(settled, timeout=120, interval=0.2, what="every run ended")
    finally:
        for client in workers:
            client.shutdown(timeout=2.0)
        submitter_client.shutdown(timeout=2.0)
    runs = dict(_query(url, "SELECT state, count(*) FROM cyclone_runs GROUP BY state"))
    ledger = _query(url, "SELECT count(*), count(DISTINCT run_id) FROM fault_ledger")[0]
    failed = _query(url, "SELECT error FROM cyclone_steps WHERE state <> 'completed' LIMIT 5")
    assert server.restarts - before == restarts
    assert submitter.submitted > 20 * restarts, submitter.submitted
    assert runs == {"completed": runs.get("completed", 0)}, (runs, failed)
    assert runs["completed"] >= submitter.submitted  # every acknowledged submit, and more
    assert ledger == (runs["completed"], runs["completed"])  # none lost, none doubled
    # every connection-level failure was one warning line: no traceback of one at ERROR
    for record in caplog.records:
        if record.levelno >= logging.ERROR and record.exc_info:
            assert not database_lost(record.exc_info[1]), record.getMessage()
    assert sum(errors.values()) > 0, "the restarts were noticed"
    lost_lines = [r for r in caplog.records if "database unreachable" in r.getMessage()]
    assert len(lost_lines) >= sum(errors.values())
    assert all(r.levelno == logging.WARNING and not r.exc_info for r in lost_lines)


def test_restarts_under_load_fail_no_run_and_lose_or_double_nothing(
    server: OwnServer, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Four ``pg_ctl restart -m fast`` while two clients (4 worker threads each) run
    one-node flows with ``max_attempts: 1``: every run completes with exactly one ledger
    row (the BEGIN of ``ctx.completion_tx()`` on a connection the restart killed does not
    fail the attempt with ``AdminShutdown``). The submitter
    is paced to about what the workers keep up with (50 runs/s at most; 8 workers of
    0.1 s steps do 80/s): unpaced, it queued a backlog that took most of the test to
    drain once the restarts were over, and a backlog the restarts never reach proves
    nothing more."""
    _restarts_under_load(server, url, restarts=4, every_s=1.0, caplog=caplog, pace_s=0.02)


@pytest.mark.slow
def test_restarts_under_load_soak(
    server: OwnServer, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The soak version: 15 restarts, 2 s apart, the submitter paced to what the workers
    keep up with."""
    _restarts_under_load(server, url, restarts=15, every_s=2.0, caplog=caplog, pace_s=0.02)


# -- raised default isolation ------------------------------------------------------------


def _diamond(call: str) -> Any:
    return load_flow_text(
        f"""
name: iso_diamond
nodes:
  a: {{call: "{call}"}}
  b: {{call: "{call}", needs: [a]}}
  c: {{call: "{call}", needs: [a]}}
  d: {{call: "{call}", needs: [b, c]}}
"""
    )


PARENTS = 50


def _fan_in(call: str) -> Any:
    parents = "".join(f'  p{i}: {{call: "{call}"}}\n' for i in range(PARENTS))
    needs = ", ".join(f"p{i}" for i in range(PARENTS))
    return load_flow_text(
        f'name: iso_fan_in\nnodes:\n{parents}  child: {{call: "{call}", needs: [{needs}]}}\n'
    )


# Half the steps return at once (the group commit completes them), half write their ledger
# row first in ctx.completion_tx() (under a raised isolation its snapshot would then
# predate its sibling's commit).
ECHO = "cyclone_test_handlers.basic:echo"
LEDGER = "cyclone_test_handlers.faults:ledger"


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
def test_diamonds_and_fan_ins_finish_under_a_raised_default_isolation(
    server: OwnServer, url: str, isolation: str
) -> None:
    """A database whose ``default_transaction_isolation`` is ``isolation``: 20 diamonds
    and 2 fifty-parent fan-ins finish, each child once (no child stays ``pending`` for
    ever under ``repeatable read``, no completion fails with ``SerializationFailure`` under
    ``serializable``: else the bounded poll times out)."""
    with psycopg.connect(url, autocommit=True) as conn:
        database = conn.info.dbname
        conn.execute(f"ALTER DATABASE {database} SET default_transaction_isolation = '{isolation}'")
    _prepare(url)
    with psycopg.connect(url) as conn:
        assert conn.execute("SHOW transaction_isolation").fetchone() == (isolation,)
    clients = [_client(url, workers=8) for _ in range(2)]
    try:
        for client in clients:
            client.start()
        step_input = {"schema": SCHEMA, "sleep_s": 0.02}
        runs = [clients[i % 2].submit(_diamond(ECHO), step_input) for i in range(10)]
        runs += [clients[i % 2].submit(_diamond(LEDGER), step_input) for i in range(10)]
        runs += [clients[0].submit(_fan_in(ECHO), step_input)]
        runs += [clients[1].submit(_fan_in(LEDGER), step_input)]

        def ended() -> bool:
            rows = _query(url, "SELECT count(*) FROM cyclone_runs WHERE state <> 'running'")
            return rows[0][0] == len(runs)

        wait_until(ended, timeout=30, interval=0.2, what="every run ended")
    finally:
        for client in clients:
            client.shutdown(timeout=2.0)
    states = dict(_query(url, "SELECT state, count(*) FROM cyclone_runs GROUP BY state"))
    assert states == {"completed": len(runs)}
    steps = dict(_query(url, "SELECT state, count(*) FROM cyclone_steps GROUP BY state"))
    assert steps == {"completed": 20 * 4 + 2 * (PARENTS + 1)}
    assert _query(url, "SELECT count(*) FROM fault_ledger") == [(10 * 4 + PARENTS + 1,)]


def _refused(url: str, statement: str) -> tuple[str, list[BaseException]]:
    """Run a flow whose one step (3 attempts) runs ``statement`` in its completion
    transaction; returns the run's state and what the error handler got."""
    _prepare(url)
    flow = load_flow_text(
        """
name: iso_refused
nodes:
  a: {call: "cyclone_test_handlers.faults:set_isolation", retry: {max_attempts: 3}}
"""
    )
    errors: list[BaseException] = []
    client = _client(url, error_handler=lambda _event, exc: errors.append(exc))
    try:
        client.start()
        run_id = client.submit(flow, {"schema": SCHEMA, "statement": statement})
        status = client.wait(run_id, timeout=20)
    finally:
        client.shutdown(timeout=2.0)
    assert _query(url, "SELECT count(*) FROM fault_ledger") == [(0,)]  # nothing committed
    return str(status.state), errors


@pytest.mark.parametrize(
    "statement",
    [
        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        "SET default_transaction_isolation = 'serializable'",
    ],
)
def test_a_handler_changing_its_session_isolation_fails_permanently(
    url: str, statement: str
) -> None:
    """A handler that changes the session's default isolation in ``ctx.completion_tx()``
    fails its step permanently with ``IsolationLevelError`` (given to the error handler),
    found in the completion's round trip before the commit: nothing of its transaction
    commits, and the pooled connection does not keep the new default."""
    state, errors = _refused(url, statement)
    assert state == "failed"
    [(attempt, kind, error)] = _query(url, "SELECT attempt, error_kind, error FROM cyclone_steps")
    assert (attempt, kind) == (1, "handler_error")  # permanent: no second attempt
    assert "changed the isolation of its completion transaction" in error
    assert len(errors) == 1 and isinstance(errors[0], IsolationLevelError)


def test_a_handler_cannot_change_its_transaction_isolation(url: str) -> None:
    """``SET TRANSACTION ISOLATION LEVEL`` as the handler's first statement in
    ``ctx.completion_tx()`` is found in the completion's round trip (the transaction is
    no longer READ COMMITTED) and fails the step permanently with ``IsolationLevelError``:
    nothing committed (the step never completes under SERIALIZABLE)."""
    state, errors = _refused(url, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
    assert state == "failed"
    [(attempt, kind, error)] = _query(url, "SELECT attempt, error_kind, error FROM cyclone_steps")
    assert (attempt, kind) == (1, "handler_error")  # permanent: no second attempt
    assert "changed the isolation of its completion transaction" in error
    assert "serializable" in error
    assert len(errors) == 1 and isinstance(errors[0], IsolationLevelError)

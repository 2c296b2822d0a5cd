"""An engine statement that meets a prepared statement the server does not have (issue
30.7: PgBouncer in transaction mode without ``--no-prepare``, where 14 of 200 runs failed
with ``prepared statement "_pg3_0" does not exist`` / ``already exists`` charged to the
handler's attempt) is never a failed attempt: the step is left to its lease, and the
recovery sweep gives it back (reclaims + 1, attempt and errors untouched). The first such
error of a process logs one warning that names the fix (``--no-prepare``,
``CYCLONE_PREPARE=0``, docs/deployment.md#pgbouncer).

The errors are real server errors raised inside the engine's own completion statements
(``EXECUTE`` of a name the session never prepared: SQLSTATE 26000; ``PREPARE`` of a name
it already has: 42P05), injected at the sink's own fault-injection point or around
``complete_step``, so the test does not depend on which server connection a pooler picks.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from helpers.engine import worker_parts
from helpers.flows import step_flow
from helpers.rows import create_ledger, ledger_rows, step_row

from cyclone_flow import Client
from cyclone_flow.db import errors
from cyclone_flow.engine import complete
from cyclone_flow.engine.tx import Tx
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.worker.step_input import Inputs

HINT = "--no-prepare or CYCLONE_PREPARE=0"


@pytest.fixture(autouse=True)
def _fresh_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The once-per-process warning not yet given in this test."""
    monkeypatch.setattr(errors, "_prepare_warned", threading.Event(), raising=False)


def _hints(caplog: pytest.LogCaptureFixture) -> int:
    return sum(HINT in r.getMessage() for r in caplog.records)


def _uncharged(db: Any, run_id: str) -> None:
    row = step_row(db, run_id)
    assert row["state"] == "completed", row
    assert (row["attempt"], row["errors"], row["reclaims"]) == (1, [], 1), row


def test_a_prepared_statement_error_in_the_group_commit_charges_no_attempt(
    make_client: Callable[..., Client],
    db: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger="cyclone_flow")
    client = make_client(workers=2, lease_ttl=1.0, sweep_interval=0.2)
    sink = worker_parts(client).completer
    real = sink.complete_steps
    failed: list[str] = []

    def missing_statement_once(tx: Tx, batch: Any) -> Any:
        run_id = batch[0][0].run_id
        if run_id not in failed:  # the first commit of each run: the statement is gone
            failed.append(run_id)
            tx.conn.execute("EXECUTE cyclone_never_prepared")
        return real(tx, batch)

    monkeypatch.setattr(sink, "complete_steps", missing_statement_once)
    flow = step_flow("cyclone_test_handlers.basic:echo", name="pooled", retry="{max_attempts: 1}")
    client.start()
    run_ids = []
    for i in range(2):  # one after the other: each its own group commit, never a batch-mate's
        # (in a batch of two the fault fails the batch once, in the first run's name; the
        # fallback then commits that run's step alone at once: no reclaim to count)
        run_id = client.submit(flow, {"n": i})
        assert client.wait(run_id, timeout=30).state == "completed"
        _uncharged(db, run_id)
        run_ids.append(run_id)
    assert sorted(failed) == sorted(run_ids)  # each met the error once
    assert _hints(caplog) == 1, caplog.text  # once per process, though it happened twice
    assert "docs/deployment.md#pgbouncer" in caplog.text
    assert "Traceback" not in caplog.text


def test_a_prepared_statement_error_in_the_inline_completion_charges_no_attempt(
    make_client: Callable[..., Client],
    db: Any,
    schema: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A handler that wrote in ``ctx.completion_tx()``: the engine's completion statement
    fails in that transaction; the handler's write rolls back with it, and is written once
    by the attempt that completes."""
    caplog.set_level(logging.INFO, logger="cyclone_flow")
    create_ledger(db)
    client = make_client(workers=1, lease_ttl=1.0, sweep_interval=0.2)
    real = complete.complete_step
    name = f"cyclone_{uuid.uuid4().hex}"
    calls: list[int] = []

    def duplicate_statement_once(tx: Tx, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            tx.conn.execute(f"PREPARE {name} AS SELECT 1")
            tx.conn.execute(f"PREPARE {name} AS SELECT 1")  # already exists
        return real(tx, *args, **kwargs)

    monkeypatch.setattr(complete, "complete_step", duplicate_statement_once)
    flow = step_flow(
        "cyclone_test_handlers.engine:ledger", name="pooled", retry="{max_attempts: 1}"
    )
    client.start()
    run_id = client.submit(flow, {"schema": schema})
    assert client.wait(run_id, timeout=30).state == "completed"
    _uncharged(db, run_id)
    assert len(calls) == 2
    assert [r[2] for r in ledger_rows(db, run_id)] == ["attempt1"]
    assert _hints(caplog) == 1, caplog.text
    assert "DuplicatePreparedStatement" in caplog.text


def test_a_prepared_statement_error_under_ctx_upstream_charges_no_attempt(
    make_client: Callable[..., Client],
    db: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine's read behind ``ctx.upstream()`` fails and the handler lets the error
    out (or swallows it): the attempt is not the handler's to pay."""
    caplog.set_level(logging.INFO, logger="cyclone_flow")
    client = make_client(workers=1, lease_ttl=1.0, sweep_interval=0.2)
    real = Inputs.upstream_output
    calls: list[int] = []

    def missing_statement_once(self: Inputs, run_id: str, node: str) -> Any:
        calls.append(1)
        if len(calls) == 1:
            with self.db.autocommit_session() as s:
                s.conn.execute("EXECUTE cyclone_never_prepared")
        return real(self, run_id, node)

    monkeypatch.setattr(Inputs, "upstream_output", missing_statement_once)
    flow = load_flow_text(
        "name: pooled\nnodes:\n"
        "  a: {call: cyclone_test_handlers.basic:echo}\n"
        "  s:\n    call: cyclone_test_handlers.conditions:upstream\n    needs: [a]\n"
        '    input: {names: ["a"]}\n    retry: {max_attempts: 1}\n'
    )
    client.start()
    run_id = client.submit(flow, {"n": 1})
    assert client.wait(run_id, timeout=30).state == "completed"
    _uncharged(db, run_id)
    assert len(calls) == 2
    assert _hints(caplog) == 1, caplog.text

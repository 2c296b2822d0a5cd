"""OpenTelemetry traces: the submitter's trace context is stored with the run
and its steps, so one run is one trace across processes; one span per step attempt
(claim -> handler -> commit) with its handler and commit as children; child runs, fan-out
items and ``ctx.submit_completion`` continue the trace. In-memory exporter in this
process; a real ``cyclone-flow worker`` process writes its spans to a file."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.engine import database
from helpers.otel import OTEL_SITE, SpanRecord, from_memory, read_spans, recording
from helpers.paths import REPO
from helpers.procs import WorkerProcess, wait_until
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cyclone_flow import Client, load_flow
from cyclone_flow.flowfile import load_flow_text

CHAIN = """
name: traced_chain
nodes:
  a:
    call: cyclone_test_handlers.basic:echo
  b:
    call: cyclone_test_handlers.basic:echo
    needs: [a]
"""

FLAKY = """
name: traced_flaky
nodes:
  flaky:
    call: cyclone_test_handlers.tracing:fail_first
    retry: {max_attempts: 2, backoff: {initial: 0s}}
"""

PARENT = """
name: traced_parent
nodes:
  first:
    call: cyclone_test_handlers.basic:echo
  sub:
    type: child
    flow: child.yaml
    needs: [first]
  each:
    type: fan_out
    over: [1, 2]
    call: cyclone_test_handlers.basic:echo
"""

CHILD = """
name: traced_child
nodes:
  inner:
    call: cyclone_test_handlers.basic:echo
"""

SUBMITS = """
name: traced_submitter
nodes:
  submit:
    call: cyclone_test_handlers.tracing:submit_job
"""


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """This process's spans, recorded for the test only."""
    yield from recording()


def _tracer() -> trace.Tracer:
    return trace.get_tracer("cyclone-tests")


def _trace_id(span: trace.Span) -> str:
    return f"{span.get_span_context().trace_id:032x}"


def _traceparents(db: psycopg.Connection[Any], run_id: str) -> tuple[str | None, set[Any]]:
    run = db.execute("SELECT traceparent FROM cyclone_runs WHERE id = %s", [run_id]).fetchone()
    assert run is not None
    rows = db.execute("SELECT traceparent FROM cyclone_steps WHERE run_id = %s", [run_id])
    return run[0], {r[0] for r in rows}


def _named(records: list[SpanRecord], prefix: str) -> list[SpanRecord]:
    return [r for r in records if r.name.startswith(prefix)]


def test_one_trace_per_run_across_a_submit_here_and_a_worker_process(
    spans: InMemorySpanExporter,
    make_client: Callable[..., Client],
    database_url: str,
    schema: str,
    db: psycopg.Connection[Any],
    tmp_path: Path,
) -> None:
    client = make_client()
    with _tracer().start_as_current_span("request") as request:
        run_id = client.submit(load_flow_text(CHAIN), {"x": 1})
    trace_id = _trace_id(request)
    [submit] = _named(from_memory(spans), "cyclone.submit")
    assert submit.trace_id == trace_id and submit.attributes["cyclone.run_id"] == run_id
    assert submit.attributes["cyclone.flow"] == "traced_chain"
    # the context crosses the database: the run and every step carry the submit span's
    stored, on_steps = _traceparents(db, run_id)
    assert stored is not None and stored.startswith(f"00-{trace_id}-{submit.span_id}-")
    assert int(stored[-2:], 16) & 1  # sampled
    assert on_steps == {stored}

    out = tmp_path / "spans.jsonl"
    worker = WorkerProcess(
        database_url,
        schema,
        tmp_path / "worker.log",
        env={"PYTHONPATH": str(OTEL_SITE), "OTEL_TEST_SPANS_FILE": str(out)},
    )
    try:
        assert client.wait(run_id, timeout=60).state == "completed", worker.log()
        wait_until(lambda: len(_named(read_spans(out), "cyclone.step")) == 2, timeout=20)
    finally:
        worker.terminate()
    records = read_spans(out)
    steps = _named(records, "cyclone.step")
    assert {s.attributes["cyclone.node"] for s in steps} == {"a", "b"}
    for step in steps:
        assert step.trace_id == trace_id  # one trace: the submitter's
        assert step.parent_id == submit.span_id
        assert step.attributes["cyclone.run_id"] == run_id
        assert step.attributes["cyclone.flow"] == "traced_chain"
        assert step.attributes["cyclone.queue"] == "default"
        assert step.attributes["cyclone.attempt"] == 1
        assert step.attributes["cyclone.outcome"] == "completed"
        assert step.status == "UNSET"
        children = {r.name.split()[0] for r in records if r.parent_id == step.span_id}
        assert children == {"cyclone.handler", "cyclone.commit"}, records
    # the group commit: a span of its own, linked to the attempts it committed
    group = _named(records, "cyclone.group_commit")
    assert group and {link for g in group for link in g.links} >= {s.span_id for s in steps}


def test_a_retried_step_has_one_span_per_attempt_with_the_error_recorded(
    spans: InMemorySpanExporter, make_client: Callable[..., Client]
) -> None:
    client = make_client(workers=1)
    with _tracer().start_as_current_span("request") as request:
        run_id = client.submit(load_flow_text(FLAKY), None)
    client.start()
    assert client.wait(run_id, timeout=30).state == "completed"
    wait_until(lambda: len(_named(from_memory(spans), "cyclone.step")) == 2)
    records = from_memory(spans)
    first, second = sorted(
        _named(records, "cyclone.step"), key=lambda r: r.attributes["cyclone.attempt"]
    )
    assert [first.attributes["cyclone.attempt"], second.attributes["cyclone.attempt"]] == [1, 2]
    assert {first.trace_id, second.trace_id} == {_trace_id(request)}
    assert first.status == "ERROR" and "exception" in first.events
    assert first.attributes["cyclone.error_kind"] == "handler_error"
    assert first.attributes["cyclone.outcome"] == "retry_scheduled"
    assert second.status == "UNSET" and second.attributes["cyclone.outcome"] == "completed"
    [failed_handler] = [
        r for r in records if r.parent_id == first.span_id and r.name.startswith("cyclone.handler")
    ]
    assert failed_handler.status == "ERROR" and "exception" in failed_handler.events


def test_child_runs_and_fan_out_items_continue_the_parents_trace(
    spans: InMemorySpanExporter,
    make_client: Callable[..., Client],
    db: psycopg.Connection[Any],
    tmp_path: Path,
) -> None:
    (tmp_path / "child.yaml").write_text(CHILD)
    (tmp_path / "parent.yaml").write_text(PARENT)
    client = make_client(workers=2)
    with _tracer().start_as_current_span("request") as request:
        run_id = client.submit(load_flow(tmp_path / "parent.yaml"), None)
    client.start()
    assert client.wait(run_id, timeout=30).state == "completed"
    child = db.execute(
        "SELECT id::text, traceparent FROM cyclone_runs WHERE parent_run_id = %s", [run_id]
    ).fetchone()
    assert child is not None
    parent_context, _ = _traceparents(db, run_id)
    assert child[1] == parent_context  # inherited, not a new trace
    _, item_contexts = _traceparents(db, run_id)
    assert item_contexts == {parent_context}  # the fan-out items' rows too
    wait_until(lambda: len(_named(from_memory(spans), "cyclone.step")) == 4)
    steps = _named(from_memory(spans), "cyclone.step")
    assert {s.attributes["cyclone.node"] for s in steps} == {"first", "inner", "each[0]", "each[1]"}
    assert {s.trace_id for s in steps} == {_trace_id(request)}
    [inner] = [s for s in steps if s.attributes["cyclone.node"] == "inner"]
    assert inner.attributes["cyclone.run_id"] == child[0]
    assert inner.attributes["cyclone.flow"] == "traced_child"


def test_submit_completion_continues_the_trace_of_the_handler(
    spans: InMemorySpanExporter, make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client(workers=1)
    with _tracer().start_as_current_span("request") as request:
        run_id = client.submit(load_flow_text(SUBMITS), None)
    client.start()
    assert client.wait(run_id, timeout=30).state == "completed"
    [submitter] = client.list_steps(run_id)
    job_id = submitter.output["job"]  # type: ignore[index]
    assert client.wait(job_id, timeout=30).state == "completed"
    wait_until(lambda: len(_named(from_memory(spans), "cyclone.step")) == 2)
    records = [r for r in from_memory(spans) if r.name != "cyclone.group_commit"]
    assert {r.trace_id for r in records} == {_trace_id(request)}  # both runs: one trace
    [handler] = _named(records, "cyclone.handler submit")
    [inner_submit] = [
        r for r in _named(records, "cyclone.submit") if r.parent_id == handler.span_id
    ]
    assert inner_submit.attributes["cyclone.run_id"] == job_id
    stored, _ = _traceparents(db, job_id)
    assert stored is not None and inner_submit.span_id in stored


def test_submit_tx_stores_the_callers_trace(
    spans: InMemorySpanExporter, make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    client = make_client()
    flow = load_flow_text(CHAIN)
    with (
        _tracer().start_as_current_span("request") as request,
        database(client).pool.connection() as conn,
    ):
        run_id = client.submit_tx(conn, flow, None)
    with _tracer().start_as_current_span("batch") as batch:
        [many_a, many_b] = client.submit_many(flow, [None, None])
    stored, on_steps = _traceparents(db, run_id)
    assert stored is not None and stored.split("-")[1] == _trace_id(request)
    assert on_steps == {stored}
    for rid in (many_a, many_b):
        bulk, bulk_steps = _traceparents(db, rid)
        assert bulk is not None and bulk.split("-")[1] == _trace_id(batch)
        assert bulk_steps == {bulk}


def test_without_the_extra_nothing_is_traced_or_stored(
    database_url: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    """opentelemetry made unimportable: the no-op path, and no trace context stored."""
    code = f"""
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from cyclone_flow import Client, tracing
from cyclone_flow.flowfile import load_flow_text
assert not tracing.ENABLED and tracing.current_traceparent() is None
with Client({database_url!r}, schema={schema!r}) as client:
    print(client.submit(load_flow_text({CHAIN!r}), None))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CYCLONE_")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1]
    assert _traceparents(db, run_id) == (None, {None})

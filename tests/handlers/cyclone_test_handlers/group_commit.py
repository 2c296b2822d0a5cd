"""Handlers and worker process for the group-commit tests (used by
tests/chaos/test_chaos_group_commit.py, tests/integration/test_group_commit.py).

The handlers never open ``ctx.completion_tx()``, so their completions go through the
client's completer (group commit). Each call appends one row to ``<schema>.gc_calls`` on
the handler's own autocommit connection (one per thread), so a test can count handler
calls per step: at-least-once, more than one only when a crash made the step run again.

Outputs are a pure function of the inputs, so a test can check that every downstream step
saw its upstream's outputs: for run input ``{"n": n}`` the flow :data:`FLOW` ends with
``e.v == 33 * n + 31`` (see :func:`expected`).

The worker process (:func:`main`) SIGKILLs itself at these points, each reached with
probability ``CHAOS_KILL_P`` (see :func:`cyclone_test_handlers.chaos.maybe_die`):

- ``handler_returned``: the handler's last line, its call recorded, nothing handed over;
- ``queued``: the completion was handed to the completer (the lease held, not committed);
- ``in_batch``: inside the completer's batch transaction, every statement run, not
  committed;
- ``after_batch_commit``: the ``completed`` step event of a step of a committed batch (the
  batch's other steps are not settled yet).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import psycopg
from psycopg import sql

from cyclone_test_handlers.chaos import maybe_die

POINTS = ("handler_returned", "queued", "in_batch", "after_batch_commit")

FLOW = """
name: gc_chaos
nodes:
  a:
    call: "cyclone_test_handlers.group_commit:node"
  b:
    call: "cyclone_test_handlers.group_commit:node"
    needs: [a]
    input: {up: "${{ nodes.a.output }}"}
  c:
    call: "cyclone_test_handlers.group_commit:node"
    needs: [a]
    input: {up: "${{ nodes.a.output }}"}
  d:
    call: "cyclone_test_handlers.group_commit:node"
    needs: [b, c]
    input: {b: "${{ nodes.b.output }}", c: "${{ nodes.c.output }}"}
  fan:
    type: fan_out
    needs: [a]
    over: "${{ nodes.a.output.items }}"
    call: "cyclone_test_handlers.group_commit:item"
    max_parallel: 2
  e:
    call: "cyclone_test_handlers.group_commit:node"
    needs: [d, fan]
    input: {d: "${{ nodes.d.output }}", fan: "${{ nodes.fan.output }}"}
"""
"""A diamond (a, b, c, d), a fan-out of three items after ``a``, and a join ``e``."""

STEPS_PER_RUN = 9  # a, b, c, d, e, fan and its three items

CALLS_DDL = """
CREATE TABLE gc_calls (
    id       bigserial   PRIMARY KEY,
    run_id   uuid        NOT NULL,
    node     text        NOT NULL,
    step_id  bigint      NOT NULL,
    pid      integer     NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE gc_completions (
    id       bigserial   PRIMARY KEY,
    step_id  bigint      NOT NULL,
    owner    text,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION gc_completed() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO gc_completions (step_id, owner) VALUES (NEW.id, NEW.lease_owner);
    RETURN NEW;
END $$;
CREATE TRIGGER gc_completed AFTER UPDATE OF state ON cyclone_steps
    FOR EACH ROW WHEN (NEW.state = 'completed' AND OLD.state IS DISTINCT FROM 'completed')
    EXECUTE FUNCTION gc_completed();
"""
"""``gc_calls``: one row per handler call. ``gc_completions``: one row per transition of a
step to ``completed`` (a trigger in the test schema: a step completed twice shows twice).
Run with the test schema as search_path."""

_local = threading.local()
_config: dict[str, str] = {}
_opened: list[psycopg.Connection[Any]] = []
_opened_lock = threading.Lock()


def close_connections() -> None:
    """Close the handlers' connections of this process (in-process tests, at teardown)."""
    with _opened_lock:
        for conn in _opened:
            conn.close()
        _opened.clear()


def configure(database_url: str, schema: str) -> None:
    """Where the handlers of this process record their calls (in-process tests); worker
    processes read ``GC_DATABASE_URL`` and ``GC_SCHEMA`` instead."""
    _config.update(url=database_url, schema=schema)


def _record(ctx: Any) -> None:
    url = _config.get("url") or os.environ["GC_DATABASE_URL"]
    schema = _config.get("schema") or os.environ["GC_SCHEMA"]
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed or getattr(_local, "key", None) != (url, schema):
        conn = psycopg.connect(url, autocommit=True)
        _local.conn, _local.key = conn, (url, schema)
        with _opened_lock:
            _opened.append(conn)
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.gc_calls (run_id, node, step_id, pid) VALUES (%s, %s, %s, %s)"
        ).format(sql.Identifier(schema)),
        (ctx.run_id, ctx.node, ctx.step_id, os.getpid()),
    )


def expected(n: int) -> dict[str, Any]:
    """The output of every node (not the items) of a run with input ``{"n": n}``."""
    d = (n + 1) + 2 * n
    fan = [10 * (n + i) for i in range(3)]
    return {
        "a": {"v": n, "items": [n, n + 1, n + 2]},
        "b": {"v": n + 1},
        "c": {"v": 2 * n},
        "d": {"v": d},
        "fan": fan,
        "e": {"v": d + sum(fan)},
    }


def node(ctx: Any, input: Any) -> Any:
    """The nodes a..e: a pure function of the input (see :func:`expected`)."""
    _record(ctx)
    if ctx.node == "a":
        n = int(input["n"])
        out: Any = {"v": n, "items": [n, n + 1, n + 2]}
    elif ctx.node == "b":
        out = {"v": input["up"]["v"] + 1}
    elif ctx.node == "c":
        out = {"v": input["up"]["v"] * 2}
    elif ctx.node == "d":
        out = {"v": input["b"]["v"] + input["c"]["v"]}
    else:
        out = {"v": input["d"]["v"] + sum(input["fan"])}
    maybe_die("handler_returned", ctx.run_id, ctx.node)
    return out


def item(ctx: Any, input: Any) -> Any:
    """A fan-out item: ten times its element."""
    _record(ctx)
    maybe_die("handler_returned", ctx.run_id, ctx.node)
    return 10 * int(input)


GATE = threading.Event()
"""Handlers called with ``{"gate": true}`` wait for it (in-process tests set it)."""


def gated(ctx: Any, input: Any) -> Any:
    """Record the call; with ``input["gate"]`` wait (up to 20 s) until :data:`GATE` is set
    or the step is cancelled; return ``{"n": input["n"]}``."""
    _record(ctx)
    if input.get("gate"):
        for _ in range(400):
            if GATE.wait(0.05) or ctx.cancelled():
                break
    return {"n": input["n"]}


def _after_commit(event: Any) -> None:
    if event.kind == "completed":
        maybe_die("after_batch_commit", event.run_id, event.node)


def main() -> None:
    """A worker process with the kill points of the module docstring: ``python -m
    cyclone_test_handlers.group_commit`` with ``GC_DATABASE_URL``, ``GC_SCHEMA`` and
    ``GC_LEASE_TTL`` (seconds) set; runs until killed or SIGTERM."""
    from cyclone_flow import Client
    from cyclone_flow.worker.completion import BatchSink, Completion

    client = Client(
        os.environ["GC_DATABASE_URL"],
        schema=os.environ["GC_SCHEMA"],
        workers=int(os.environ.get("GC_WORKERS", "4")),
        lease_ttl=float(os.environ.get("GC_LEASE_TTL", "1")),
        sweep_interval=float(os.environ.get("GC_SWEEP_INTERVAL", "0.3")),
        poll_interval=(0.05, 0.5),
        allow_modules=["cyclone_test_handlers"],
        on_step_event=_after_commit,
    )
    complete_steps = BatchSink.complete_steps  # this process's one client's completer

    def complete_steps_with_kill_point(self: BatchSink, tx: Any, batch: Any) -> Any:
        outcomes = complete_steps(self, tx, batch)
        step = batch[0][0]
        maybe_die("in_batch", step.run_id, f"{step.node}+{len(batch) - 1}")
        return outcomes

    BatchSink.complete_steps = complete_steps_with_kill_point  # type: ignore[method-assign]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    client.start()
    completer = client.runtime.executor.batch if client.runtime else None
    assert completer is not None, "group commit is off"
    queue = completer.complete

    def queue_with_kill_point(completion: Completion) -> bool:
        queued = queue(completion)
        if queued:
            maybe_die("queued", completion.step.run_id, completion.step.node)
        return queued

    completer.complete = queue_with_kill_point  # type: ignore[method-assign]
    stop.wait()
    client.shutdown(timeout=1.0)


if __name__ == "__main__":
    main()

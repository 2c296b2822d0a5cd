"""Chaos handlers and worker process (tests/chaos/test_chaos_workers.py).

Each step writes one row into ``<schema>.chaos_ledger`` (``UNIQUE (run_id, node)``, plain
``INSERT``: a second effect for a step would raise, fail the attempt and so fail the run)
through ``ctx.completion_tx()``. The worker process SIGKILLs itself at the named points,
each reached with probability ``CHAOS_KILL_P`` (a point that has not fired yet in this test
fires with probability ``CHAOS_FIRST_P``, so every point is seen early):

- ``before_handler``: the handler's first line;
- ``inside_handler``: the completion transaction is open, nothing written yet;
- ``after_write``: the ledger row is written, the completion not committed;
- ``after_commit``: the ``completed`` step event, which fires after the commit (only in
  the processes :func:`main` starts: ``cyclone-flow worker`` takes no hook).

Before it dies, the process appends ``point pid run_id node`` to ``CHAOS_KILL_LOG``. Once
the file ``CHAOS_CALM_FILE`` exists, no point fires any more.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from typing import Any

from psycopg import sql

POINTS = ("before_handler", "inside_handler", "after_write", "after_commit")

LEDGER_DDL = """
CREATE TABLE chaos_ledger (
    run_id  uuid        NOT NULL,
    node    text        NOT NULL,
    pid     integer     NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (run_id, node)
)
"""

_fired: set[str] = set()  # points this test saw fire (read back from the kill log)


def _fired_already(point: str, log: str) -> bool:
    if point in _fired:
        return True
    try:
        with open(log, encoding="utf-8") as fh:
            _fired.update(line.split(" ", 1)[0] for line in fh)
    except FileNotFoundError:
        pass
    return point in _fired


def maybe_die(point: str, run_id: str, node: str) -> None:
    """SIGKILL this process at ``point`` with the configured probability, after logging it.
    A no-op unless ``CHAOS_KILL_P`` and ``CHAOS_KILL_LOG`` are set, or once
    ``CHAOS_CALM_FILE`` exists."""
    p = float(os.environ.get("CHAOS_KILL_P", "0") or 0)
    log = os.environ.get("CHAOS_KILL_LOG")
    if p <= 0 or not log:
        return
    calm = os.environ.get("CHAOS_CALM_FILE")
    if calm and os.path.exists(calm):  # the test ended the chaos
        return
    if not _fired_already(point, log):
        p = max(p, float(os.environ.get("CHAOS_FIRST_P", "0.3")))
    if random.random() >= p:
        return
    line = f"{point} {os.getpid()} {run_id} {node}\n".encode()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write with O_APPEND: lines never interleave
    finally:
        os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def step(ctx: Any, input: Any) -> Any:
    """One chaos step: the kill points around one ledger row written in the completion
    transaction."""
    maybe_die("before_handler", ctx.run_id, ctx.node)
    conn = ctx.completion_tx()
    maybe_die("inside_handler", ctx.run_id, ctx.node)
    conn.execute(
        sql.SQL("INSERT INTO {}.chaos_ledger (run_id, node, pid) VALUES (%s, %s, %s)").format(
            sql.Identifier(input["schema"])
        ),
        (ctx.run_id, ctx.node, os.getpid()),
    )
    maybe_die("after_write", ctx.run_id, ctx.node)
    return {"node": ctx.node, "pid": os.getpid()}


def after_commit(event: Any) -> None:
    """``on_step_event`` hook: the ``after_commit`` kill point."""
    if event.kind == "completed":
        maybe_die("after_commit", event.run_id, event.node)


def main() -> None:
    """A worker process with the ``after_commit`` hook: ``python -m
    cyclone_test_handlers.chaos`` with ``CHAOS_DATABASE_URL``, ``CHAOS_SCHEMA`` and
    ``CHAOS_LEASE_TTL`` (seconds) set; runs until killed or SIGTERM."""
    from cyclone_flow import Client

    client = Client(
        os.environ["CHAOS_DATABASE_URL"],
        schema=os.environ["CHAOS_SCHEMA"],
        workers=int(os.environ.get("CHAOS_WORKERS", "2")),
        lease_ttl=float(os.environ.get("CHAOS_LEASE_TTL", "1")),
        poll_interval=(0.05, 0.5),
        allow_modules=["cyclone_test_handlers"],
        on_step_event=after_commit,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    client.start()
    stop.wait()
    client.shutdown(timeout=1.0)


if __name__ == "__main__":
    main()

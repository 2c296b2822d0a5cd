"""``Client``: submit runs, start workers, wait for and inspect runs.

``Client(database, **options)`` takes a Postgres URL (it then sizes its own psycopg_pool
pool by the pool budget rule) or a ``psycopg_pool.ConnectionPool`` (checked against the
rule: ``max_size >= tx_slots + 6``; Engine Design: Pool Budget). Options are the seeds'
Client Options in snake_case, validated at construction (see :mod:`cyclone_flow.config`).
A client that only submits starts no thread.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any, Unpack

import psycopg
from psycopg_pool import ConnectionPool

from cyclone_flow.config import ClientConfig, ClientOptions, build_config
from cyclone_flow.errors import (
    ConfigError,
    FlowError,
    InputValidationError,
    PayloadTooLargeError,
    Problem,
    RunStateError,
)
from cyclone_flow.spec import load_flow
from cyclone_flow.spec.inputs import validate_input
from cyclone_flow.spec.model import JSON, Flow
from cyclone_flow.store.migrate import check_schema_version
from cyclone_flow.store.migrate import migrate as migrate_schema
from cyclone_flow.store.store import (
    RunStatus,
    StepStatus,
    Store,
    Wakeups,
    contains_nul,
    dumps,
    parse_run_id,
)
from cyclone_flow.worker.cache import OutputCache
from cyclone_flow.worker.events import StepEvent, call_hook, emit_engine_events
from cyclone_flow.worker.executor import Executor
from cyclone_flow.worker.imports import AllowList, HandlerResolver
from cyclone_flow.worker.runtime import Worker

FlowLike = Flow | str | os.PathLike[str]
_SIGNAL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$")  # as in flow.schema.json


class Client:
    """The engine's Python API.

    Parameters
    ----------
    database:
        A Postgres URL/conninfo string, or an open ``psycopg_pool.ConnectionPool``.
    **options:
        See :class:`cyclone_flow.config.ClientConfig` (``schema``, ``workers``,
        ``worker_queues``, ``tx_slots``, ``client_id``, ``lease_ttl`` seconds,
        ``max_reclaims``, ``poll_interval`` (min, max) seconds, ``max_signal_wait``
        seconds, ``notify``, ``logger``, ``on_step_event``, ``error_handler``,
        ``payload_limits``, ``allow_modules`` ...).

    Raises
    ------
    ConfigError
        An invalid option, or a pool below the budget ``tx_slots + 6``.
    SchemaOutdatedError
        The database schema is older than this code (run ``cyclone-flow migrate``).
    psycopg.OperationalError
        The database cannot be reached.
    """

    def __init__(
        self, database: str | ConnectionPool[Any], /, **options: Unpack[ClientOptions]
    ) -> None:
        self.config: ClientConfig = build_config(options)
        cfg = self.config
        allow = cfg.allow_modules
        if allow is None:
            allow = AllowList(allow_all=True)
        elif not isinstance(allow, AllowList):
            allow = AllowList(prefixes=list(allow))
        self._allow = allow
        if isinstance(database, ConnectionPool):
            if database.max_size < cfg.pool_min_size:
                raise ConfigError(
                    f"the pool's max_size is {database.max_size}, below the pool budget "
                    f"tx_slots + 6 = {cfg.tx_slots} + 6 = {cfg.pool_min_size}: every completion "
                    "transaction holds a connection (tx_slots), plus 6 for the claim loop, "
                    "the recovery sweep, the scanners, the listener and API calls; raise "
                    "max_size or lower tx_slots"
                )
            self.pool = database
            self._owns_pool = False
        elif isinstance(database, str):
            # Probe first: a bad URL is one clear error now, not a pool retrying forever.
            with psycopg.connect(database, connect_timeout=10) as probe:
                if cfg.check_schema:
                    check_schema_version(probe, cfg.schema)
            self.pool = ConnectionPool(
                database,
                min_size=min(2, cfg.pool_min_size),
                max_size=cfg.pool_min_size,
                open=True,
                name=f"cyclone-{cfg.client_id}",
            )
            self._owns_pool = True
        else:
            raise ConfigError("database must be a URL string or a psycopg_pool.ConnectionPool")
        if not self._owns_pool and cfg.check_schema:
            with self.pool.connection() as conn:
                check_schema_version(conn, cfg.schema)
        self.store = Store(self.pool, cfg.schema)
        self.cache = OutputCache()
        self._tx_slots = threading.BoundedSemaphore(cfg.tx_slots)
        self._worker: Worker | None = None
        self._waiters: dict[str, set[threading.Event]] = {}
        self._waiters_lock = threading.Lock()
        self._closed = False

    # -- schema ----------------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply missing migrations to this client's schema; return the versions applied."""
        with self.pool.connection() as conn:
            conn.commit()
            return migrate_schema(conn, self.config.schema)

    # -- submit ----------------------------------------------------------------------------

    def submit(self, flow: FlowLike, input: JSON = None) -> str:
        """Validate ``input`` against the flow's ``input_schema`` (after filling top-level
        ``default`` values), then write the definition, the run, its steps and deps in one
        transaction, and publish the wakeup after the commit. Returns the run id (UUID).

        Raises FlowError (a bad flow file), InputValidationError, PayloadTooLargeError.
        """
        spec, input_json = self._prepare(flow, input)
        wakeups = Wakeups()
        with self.pool.connection() as conn, conn.transaction():
            run_id = self._insert_run(conn, spec, input_json, wakeups)
        self._publish(wakeups)
        return run_id

    def submit_tx(self, conn: psycopg.Connection[Any], flow: FlowLike, input: JSON = None) -> str:
        """Like :meth:`submit`, inside the caller's transaction on ``conn``: committed or
        rolled back with it (an autocommit ``conn`` commits at once). Publishes nothing:
        workers find the run within one poll interval."""
        spec, input_json = self._prepare(flow, input)
        if conn.autocommit:  # no caller transaction to join: be atomic on our own
            with conn.transaction():
                return self._insert_run(conn, spec, input_json, Wakeups())
        # Inside (or implicitly opening) the caller's transaction: the caller commits or
        # rolls back. (conn.transaction() here would commit an idle connection's work.)
        return self._insert_run(conn, spec, input_json, Wakeups())

    def _insert_run(
        self, conn: psycopg.Connection[Any], spec: Flow, input_json: str, wakeups: Wakeups
    ) -> str:
        """The run with this client's output limit and max_signal_wait copied onto it
        (Client Options: Limits and Retention, WithMaxSignalWait)."""
        max_wait = self.config.max_signal_wait
        return self.store.insert_run(
            conn,
            spec,
            input_json,
            output_limit=self.config.payload_limits.output_bytes,
            max_signal_wait_s=max_wait if max_wait > 0 else None,
            wakeups=wakeups,
        )

    def _prepare(self, flow: FlowLike, run_input: JSON) -> tuple[Flow, str]:
        spec = flow if isinstance(flow, Flow) else load_flow(flow)
        for part in spec.tree():
            for node in part.nodes.values():
                if node.type == "child" and node.name not in part.children:
                    raise FlowError(
                        [
                            Problem(
                                part.path or "<string>",
                                1,
                                1,
                                "E030",
                                f"node {node.name!r}: its child flow is not loaded (build "
                                "flows with load_flow or load_flow_text, which load child "
                                "flows)",
                            )
                        ]
                    )
        run_input = validate_input(spec.name, spec.input_schema, run_input)
        try:
            text = dumps(run_input)
        except (TypeError, ValueError) as exc:
            raise InputValidationError(spec.name, f"input is not JSON: {exc}") from None
        if contains_nul(run_input):
            raise InputValidationError(
                spec.name, "input contains a NUL character (U+0000), which Postgres cannot store"
            )
        size = len(text.encode("utf-8"))
        if size > self.config.payload_limits.input_bytes:
            raise PayloadTooLargeError("input", size, self.config.payload_limits.input_bytes)
        return spec, text

    # -- workers ---------------------------------------------------------------------------

    def start(self, *, run_id: str | None = None) -> None:
        """Start the worker threads, claim loop, heartbeat, maintenance and listener.

        ``run_id``: claim only the steps of that run (``cyclone-flow run`` works on its own
        run and leaves the others alone); the recovery sweep still serves everyone.
        """
        if self._worker is not None:
            return
        executor = Executor(
            self.store,
            self.config,
            HandlerResolver(self._allow),
            self.cache,
            self._tx_slots,
            self._publish,
        )
        self._worker = Worker(
            self.store,
            self.config,
            executor,
            self._publish,
            self._run_done,
            only_run=parse_run_id(run_id) if run_id is not None else None,
        )
        self._worker.start()

    @property
    def worker(self) -> Worker | None:
        """The started worker machinery, or None before :meth:`start`."""
        return self._worker

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop claiming, let in-flight handlers finish for up to ``timeout`` seconds, tell
        the rest to stop and release their leases; then close the pool if this client
        opened it. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._worker is not None:
            self._worker.shutdown(timeout)
        if self._owns_pool:
            self.pool.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- runs ------------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunStatus:
        """The run's state, input, output and error; raises RunNotFoundError."""
        return self.store.get_run(parse_run_id(run_id))

    def list_steps(self, run_id: str, *, items: bool = True) -> list[StepStatus]:
        """Every step of the run (fan-out item steps only when ``items``); raises
        RunNotFoundError for an unknown run."""
        rid = parse_run_id(run_id)
        self.store.get_run(rid)
        return self.store.list_steps(rid, items=items)

    def item_progress(self, run_id: str) -> dict[str, dict[str, int]]:
        """Item counts of each started fan-out node of the run: node -> step state ->
        count (e.g. ``{"ship_each": {"completed": 40, "running": 8, "pending": 52}}``)."""
        return self.store.fan_out_progress(parse_run_id(run_id))

    def list_runs(
        self, *, flow: str | None = None, state: str | None = None, limit: int = 50
    ) -> list[RunStatus]:
        """The most recent runs, newest first."""
        return self.store.list_runs(flow=flow, state=state, limit=limit)

    def cancel(self, run_id: str, reason: str = "cancelled by operator") -> bool:
        """Cancel a running run and every non-terminal step, with the whole trees of its
        running child runs, in one transaction under the run lock; handlers still running
        learn it on their next heartbeat and their late completions are ignored. A
        cancelled child run discards its parent's node (kind ``child_failed``). Returns
        False when the run was already terminal (a racing completion won: exactly one
        wins). Raises RunNotFoundError."""
        rid = parse_run_id(run_id)
        wakeups = Wakeups(runs_done={rid})
        done, cancelled = self.store.cancel_run(rid, reason, wakeups)
        if done:
            self._publish(wakeups)
            for node in cancelled:
                call_hook(
                    self.config.logger,
                    self.config.on_step_event,
                    StepEvent("cancelled", rid, node, error=reason, error_kind="cancelled"),
                )
        return done

    def retry(self, run_id: str, node: str | None = None) -> list[str]:
        """Operator retry of a failed or cancelled run: its discarded steps (all, or only
        ``node``) and every cancelled step go back to pending/available with attempts and
        reclaims reset; the run is running again. Returns the nodes reset.
        Raises RunNotFoundError, RunStateError."""
        reset, wakeups = self.store.retry_run(parse_run_id(run_id), node)
        self._publish(wakeups)
        return reset

    def retry_all(self, flow: str | None = None) -> list[str]:
        """:meth:`retry` every failed run (of ``flow`` when given); returns their ids."""
        retried = []
        for rid in self.store.list_failed_runs(flow):
            try:
                self.retry(rid)
            except RunStateError:
                continue  # retried or cancelled meanwhile by someone else
            retried.append(rid)
        return retried

    def signal(self, run_id: str, name: str, payload: JSON = None) -> str | None:
        """Send signal ``name`` with ``payload`` (any JSON value; it becomes the output of
        the wait_signal node that consumes it) to run ``run_id``.

        A wait_signal node of the run waiting for ``name`` consumes it at once and the run
        advances in the same transaction; a signal sent before the node waits is kept and
        consumed when the node starts waiting. One signal is consumed by one node. Returns
        the node that consumed it, or None when it was kept.

        Raises
        ------
        PayloadTooLargeError
            The encoded payload is over ``payload_limits.signal_bytes`` (before any write).
        InputValidationError
            ``name`` is not a signal name, or ``payload`` is not JSON.
        RunNotFoundError
            No such run.
        RunStateError
            The run is finished.
        SignalRejectedError
            No wait_signal node of the run waits (or will wait) for ``name``, or each one
            that does has a signal kept already.
        """
        rid = parse_run_id(run_id)
        if not isinstance(name, str) or not _SIGNAL_NAME.match(name):
            raise InputValidationError(
                "signal",
                f"invalid signal name {name!r}: letters, digits, '_', '.', ':', '-' "
                "(at most 128, not starting with '.', ':' or '-')",
            )
        try:
            text = dumps(payload)
        except (TypeError, ValueError) as exc:
            raise InputValidationError("signal", f"payload is not JSON: {exc}") from None
        if contains_nul(payload):
            raise InputValidationError(
                "signal", "payload contains a NUL character (U+0000), which Postgres cannot store"
            )
        size = len(text.encode("utf-8"))
        if size > self.config.payload_limits.signal_bytes:
            raise PayloadTooLargeError("signal", size, self.config.payload_limits.signal_bytes)
        node, acc = self.store.deliver_signal(rid, name, text)
        self._publish(acc.wakeups)
        emit_engine_events(self.config.logger, self.config.on_step_event, acc.events)
        return node

    def wait(self, run_id: str, timeout: float | None = None) -> RunStatus:
        """Block until the run is terminal or ``timeout`` seconds pass; return its status
        (still ``running`` on timeout). Woken by ``cyclone_run_done`` when this client's
        listener runs, otherwise polling within ``poll_interval``."""
        rid = parse_run_id(run_id)
        event = threading.Event()
        with self._waiters_lock:
            self._waiters.setdefault(rid, set()).add(event)
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            lo, hi = self.config.poll_interval
            interval = lo
            while True:
                status = self.store.get_run(rid)
                if status.state.terminal:
                    return status
                if deadline is not None and time.monotonic() >= deadline:
                    return status
                wait_for = (
                    interval
                    if deadline is None
                    else min(interval, max(0.0, deadline - time.monotonic()))
                )
                if event.wait(wait_for):
                    event.clear()
                else:
                    interval = min(interval * 2, hi)
        finally:
            with self._waiters_lock:
                events = self._waiters.get(rid)
                if events is not None:
                    events.discard(event)
                    if not events:
                        del self._waiters[rid]

    def _run_done(self, run_id: str) -> None:
        with self._waiters_lock:
            for event in self._waiters.get(run_id, ()):
                event.set()

    def _publish(self, wakeups: Wakeups) -> None:
        """Publish after a commit; a failure is logged at error level and loses no work
        (the polling floor finds it)."""
        if not wakeups:
            return
        for run_id in wakeups.runs_done:
            self._run_done(run_id)
        try:
            self.store.publish(wakeups)
        except Exception:
            self.config.logger.exception("could not publish wakeups; polling will find the work")


def migrate(database: str, /, *, schema: str = "public") -> list[int]:
    """Apply the missing migrations of ``schema`` on the database at URL ``database``;
    return the versions applied now (Engine Design: Schema Isolation and Migrations).
    Safe from many processes at once. Raises ConfigError for a bad schema name and
    psycopg.OperationalError when the database cannot be reached."""
    with psycopg.connect(database, connect_timeout=10) as conn:
        return migrate_schema(conn, schema)

"""``Client``: submit runs, start workers, wait for and inspect runs.

``Client(database, **options)`` takes a Postgres URL (it then sizes its own psycopg_pool
pool by the pool budget rule) or a ``psycopg_pool.ConnectionPool`` (checked against the
rule: ``max_size >= tx_slots + 6``; Engine Design: Pool Budget). Options are the seeds'
Client Options in snake_case, validated at construction (see :mod:`cyclone_flow.config`).
A client that only submits starts no thread (unless it has a ``notify_coalesce`` window, or
calls :meth:`Client.wait`, which starts its listener) and builds no worker machinery (that
is :meth:`Client.start`'s, through :mod:`cyclone_flow.worker.build`); call
:meth:`Client.shutdown` anyway.

The Client is a front door: inserts go through :class:`~cyclone_flow.inserter.Inserter`,
schedule edits through :class:`~cyclone_flow.schedule_admin.Schedules`, the dashboard's
reads through ``client.reads`` (:class:`~cyclone_flow.reads.Reads`), run-id parsing is
:mod:`cyclone_flow.run_ids`. Its methods are grouped under section banners: schema,
submission, schedules, lifecycle and observers, run reads, dashboard reads, operator
actions, waiting.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Unpack

import psycopg
from psycopg_pool import ConnectionPool

from cyclone_flow import advisor, explain, run_view
from cyclone_flow._json import Unencodable, encode_payload
from cyclone_flow.advisor import HealthReport, Thresholds
from cyclone_flow.config import (
    POOL_RESERVE,
    RETENTION_BATCH_SIZE,
    ClientConfig,
    ClientOptions,
    PayloadLimits,
    RetentionConfig,
    build_config,
    validate_retention,
)
from cyclone_flow.db import runs, step_logs, steps, workers
from cyclone_flow.db.conn import Database, Session, autocommit
from cyclone_flow.db.errors import BRIEF_POOL_WAIT_S
from cyclone_flow.db.migrate import check_schema_version, latest_version, schema_version
from cyclone_flow.db.migrate import migrate as migrate_schema
from cyclone_flow.db.pool import open_pool
from cyclone_flow.db.rows import (
    DeployedFlow,
    NodeOutput,
    QueueStats,
    Revision,
    Run,
    ScheduleRow,
    Step,
    StepLogLine,
    WorkerRow,
)
from cyclone_flow.deployments import (
    Deployments,
    DeployResult,
    FlowPlan,
    RetireResult,
    RevisionDiff,
    is_flow_reference,
    is_revision,
)
from cyclone_flow.engine import operator, signals
from cyclone_flow.engine import rerun as reruns
from cyclone_flow.engine.tx import transaction
from cyclone_flow.errors import (
    AmbiguousRunIdError,
    BatchItemError,
    ClientStateError,
    ConfigError,
    InputValidationError,
    NodeNotFoundError,
    PayloadTooLargeError,
    RunIdTooShortError,
    RunNotFoundError,
    RunStateError,
    SubmitOptionError,
    shown,
)
from cyclone_flow.events import StepEvent, call_hook, emit_engine_events
from cyclone_flow.explain import Waiting
from cyclone_flow.flowfile.model import JSON, Flow
from cyclone_flow.handlers import AllowList, HandlerResolver
from cyclone_flow.inserter import FlowLike, Inserter, RunId, RunPreview, check_flow, preview_run
from cyclone_flow.maintenance import retention
from cyclone_flow.maintenance.scheduler import ScheduleScanner
from cyclone_flow.names import SIGNAL_NAME_RULE, is_signal_name, validate_schema_name
from cyclone_flow.notify import Listener, Publisher, WakeupHub, Wakeups, WakeupTracker
from cyclone_flow.options import JobOptions, RunOptions, SubmitOptions, run_options
from cyclone_flow.reads import READS, Reads
from cyclone_flow.run_ids import (
    AMBIGUOUS_RUN_IDS_SHOWN,
    MIN_RUN_ID_PREFIX,
    is_short_hex,
    parse_run_id,
    prefix_bounds,
)
from cyclone_flow.schedule_admin import Schedules
from cyclone_flow.schedules import SyncResult
from cyclone_flow.states import EventKind
from cyclone_flow.text import printable, storable
from cyclone_flow.worker import build
from cyclone_flow.worker.heartbeat import register_owner
from cyclone_flow.worker.runtime import Worker

__all__ = [
    "AMBIGUOUS_RUN_IDS_SHOWN",
    "MIN_RUN_ID_PREFIX",
    "Client",
    "FlowLike",
    "RunId",
    "RunPreview",
    "check_schema",
    "migrate",
    "parse_run_id",
    "preview_submit",
]

DEFAULT_CHUNK_SIZE = 1000
"""Items per transaction (and per set-based statement) of ``submit_many`` / ``enqueue_many``."""


class _Deprecated:
    """A deprecated alias on :class:`Client` (one release): reading ``client.<old>`` warns
    (DeprecationWarning) and gives ``client.<new>`` (a dotted path: ``reads.list_flows``,
    a dashboard read; ``count_items``, a renamed method). Read on the class,
    ``Client.<old>`` is a function with the new one's signature and docstring that warns
    and calls it (``Client.<old>(client, ...)`` and ``help(Client)`` keep working)."""

    def __init__(self, new: str | None = None) -> None:
        self.new = new
        self.old = ""
        self.unbound: Callable[..., Any] | None = None

    def __set_name__(self, owner: type, name: str) -> None:
        self.old = name
        if self.new is None:  # a dashboard read: Client.<name> is Client.reads.<name>
            assert name in READS, name
            self.new = f"reads.{name}"
        first, _, rest = self.new.partition(".")
        target = getattr(Reads, rest) if rest else getattr(owner, first)
        alias = self

        @functools.wraps(target)
        def unbound(client: Client, /, *args: Any, **kwargs: Any) -> Any:
            return alias.__get__(client, owner)(*args, **kwargs)

        unbound.__name__ = unbound.__qualname__ = name
        unbound.__doc__ = f"Deprecated: use Client.{self.new}. {target.__doc__ or ''}"
        self.unbound = unbound

    def __get__(self, client: Client | None, owner: type | None = None) -> Any:
        if client is None:
            return self.unbound
        assert self.new is not None
        warnings.warn(
            f"Client.{self.old} is deprecated: use Client.{self.new}",
            DeprecationWarning,
            stacklevel=2,
        )
        value: Any = client
        for part in self.new.split("."):
            value = getattr(value, part)
        return value


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
        seconds, ``notify``, ``notify_coalesce`` seconds, ``logger``, ``on_step_event``,
        ``error_handler``, ``payload_limits``, ``retention``, ``allow_modules`` ...);
        docs/options.md has the full table.

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
            self._pool = database
            self._owns_pool = False
        elif isinstance(database, str):
            # Probe first: a bad URL is one clear error now, not a pool retrying forever.
            with psycopg.connect(database, **_connect_kwargs(cfg.prepare)) as probe:
                if cfg.check_schema:
                    check_schema_version(probe, cfg.schema)
            self._pool = open_pool(
                database,
                min_size=min(2, cfg.pool_min_size),
                max_size=cfg.pool_min_size,
                name=f"cyclone-{cfg.client_id}",
                prepare=cfg.prepare,
            )
            self._owns_pool = True
        else:
            raise ConfigError("database must be a URL string or a psycopg_pool.ConnectionPool")
        if not self._owns_pool and cfg.check_schema:
            with self._pool.connection() as conn:
                check_schema_version(conn, cfg.schema)
        self._db = Database(self._pool, cfg.schema)
        self._inserter = Inserter(self._db, cfg)
        # the worker machinery: built by start() (worker/build.py), never for a client
        # that only submits; the schedule scanner also by trigger_schedule()
        self._scanner: ScheduleScanner | None = None
        self._parts: build.WorkerParts | None = None
        self._worker: Worker | None = None
        self._closed = False
        self._observers: list[Callable[[StepEvent], None]] = []
        self._db_observers: list[Callable[[str], None]] = []
        # the publisher, the listener, the waiters of wait() and the tracked connections
        self._hub = WakeupHub(
            self._db,
            coalesce=cfg.notify_coalesce,
            logger=cfg.logger,
            worker=lambda: self._worker,
            liveness=cfg.poll_interval[1] / 2,
        )
        self._schedules = Schedules(self._db, self._inserter)
        self._deployments = Deployments(self._db, self._inserter, self._schedules)
        self._reads = Reads(self._db)

    # -- schema ----------------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply missing migrations to this client's schema; return the versions applied."""
        with self._pool.connection() as conn:
            conn.commit()
            return migrate_schema(conn, self.config.schema)

    # -- submission ------------------------------------------------------------------------

    def submit(
        self,
        flow: FlowLike,
        input: JSON = None,
        *,
        isolated: bool = False,
        revision: int | None = None,
        **options: Unpack[SubmitOptions],
    ) -> RunId:
        """Validate ``input`` against the flow's ``input_schema`` (after filling top-level
        ``default`` values), then write the definition, the run, its steps and deps in one
        transaction, and publish the wakeup after the commit. Returns the run id (UUID; a
        :class:`RunId` whose ``duplicate`` says a ``unique_key`` matched an existing run).

        Options (see ``docs/queues.md``): ``queue``/``priority`` (for every node that does
        not set its own), ``run_at`` (aware datetime) or ``delay`` (seconds), ``unique_key``
        (+ ``unique_window`` seconds, ``unique_states``), ``sequence``.

        ``isolated``: the run (and its child runs) belongs to this client: only its worker
        claims the steps (call ``start(run_id=...)`` next), no other worker takes them
        while this client's heartbeat row is live; once the row is gone (shutdown) or not
        heartbeated for one ``lease_ttl`` (a crash), any started client's owner release
        hands them to every worker of their queues (``cyclone-flow run``; docs/cli.md).
        The heartbeat row is written in the submitting transaction.

        ``flow`` may name a deployed flow (:meth:`deploy`): a ``str`` such as ``"nightly"``
        or ``"nightly@3"`` (``^[a-z][a-z0-9_-]*(@[0-9]+)?$``) that is not an existing
        path runs its current revision, or the one after ``@`` or given as ``revision``;
        the run records it (``Run.revision``) and runs that revision's stored definition.
        The revision is read in the insert transaction with the flow's row locked FOR
        SHARE (a concurrent retire waits for the submit).

        Raises FlowError (a bad flow file), InputValidationError, PayloadTooLargeError,
        SubmitOptionError (also ``revision`` with a flow file or Flow, or two revisions
        given); by name: FlowNotDeployedError, RevisionNotFoundError, FlowRetiredError.
        """
        if isinstance(flow, str) and is_flow_reference(flow):
            return self._submit_deployed(flow, input, revision, isolated, dict(options))
        if revision is not None:
            raise SubmitOptionError(
                "revision", revision, "only a deployed flow given by name has revisions"
            )
        opts = run_options(**options)
        if isolated:
            opts = dataclasses.replace(opts, owner=self.config.client_id)
        loaded, input_json = self._inserter.prepare(flow, input)
        register = self._register_owner if isolated else None
        with self._db.connection() as conn:  # READ COMMITTED
            run_id, wakeups = self._inserter.submit(
                conn, loaded, input_json, opts, before_commit=register
            )
            # committed: publish on the same connection (no second pool checkout)
            self._publish(wakeups, conn)
        return run_id

    def _submit_deployed(
        self,
        ref: str,
        input: JSON,
        revision: int | None,
        isolated: bool,
        options: dict[str, Any],
    ) -> RunId:
        """:meth:`submit` of the deployed flow ``ref`` (``NAME`` or ``NAME@REV``)."""
        opts = run_options(**options)
        if isolated:
            opts = dataclasses.replace(opts, owner=self.config.client_id)
        register = self._register_owner if isolated else None
        with self._db.connection() as conn:  # READ COMMITTED
            run_id, wakeups = self._deployments.insert_by_name(
                conn, ref, input, revision, opts, before_commit=register
            )
            self._publish(wakeups, conn)  # committed: publish on the same connection
        return run_id

    def _register_owner(self, conn: psycopg.Connection[Any], run_id: str) -> None:
        """This client's heartbeat row, claiming only ``run_id``, in the submitting
        transaction on ``conn`` (:func:`~cyclone_flow.worker.heartbeat.register_owner`)."""
        register_owner(
            Session(conn, self._db.q),
            client_id=self.config.client_id,
            queues=self.config.worker_queues,
            lease_ttl_s=self.config.lease_ttl,
            run_id=str(run_id),
        )

    def submit_tx(
        self,
        conn: psycopg.Connection[Any],
        flow: FlowLike,
        input: JSON = None,
        *,
        revision: int | None = None,
        **options: Unpack[SubmitOptions],
    ) -> RunId:
        """Like :meth:`submit`, inside the caller's transaction on ``conn``: committed or
        rolled back with it (an autocommit ``conn`` commits at once). Publishes nothing:
        workers find the run within one poll interval, or at once when ``conn`` is tracked
        (:meth:`track_wakeups`) and the caller calls :meth:`publish_wakeups` after the
        commit. A deployed flow by name (``"nightly"``, ``"nightly@3"``, ``revision``) as
        for :meth:`submit`; its row stays locked FOR SHARE until the caller's commit (a
        retire of it waits)."""
        opts = run_options(**options)
        if isinstance(flow, str) and is_flow_reference(flow):
            if conn.autocommit:  # no caller transaction to join: be atomic on our own
                with conn.transaction():
                    run_id, wakeups = self._deployments.insert_by_name_in(
                        conn, flow, input, revision, opts
                    )
            else:
                run_id, wakeups = self._deployments.insert_by_name_in(
                    conn, flow, input, revision, opts
                )
            self._hub.record(conn, wakeups)  # kept only when conn is tracked
            return run_id
        if revision is not None:
            raise SubmitOptionError(
                "revision", revision, "only a deployed flow given by name has revisions"
            )
        loaded, input_json = self._inserter.prepare(flow, input)
        return self._insert_tx(conn, loaded, input_json, opts)

    def enqueue(self, callable: str, args: JSON = None, **options: Unpack[JobOptions]) -> RunId:
        """Enqueue a standalone job: a one-node run of ``callable``
        (``"package.module:function"``, called as ``function(ctx, args)``), with the same
        guarantees as a flow's step (leases, retries, ``ctx.completion_tx()``, the worker's
        allow-list). The callable is not imported here: only workers import it.

        Options: those of :meth:`submit`, plus ``retry`` (max_attempts, or a mapping like a
        flow file's ``retry:``) and ``timeout`` (seconds, timedelta or ``'30s'``). Returns
        the run id. Raises SubmitOptionError, InputValidationError, PayloadTooLargeError.
        """
        flow, opts = self._job(callable, options)
        input_json = self._inserter.prepare_input(flow, args)
        with self._db.connection() as conn:  # READ COMMITTED
            run_id, wakeups = self._inserter.submit(conn, flow, input_json, opts)
            self._publish(wakeups, conn)  # committed: publish on the same connection
        return run_id

    def enqueue_tx(
        self,
        conn: psycopg.Connection[Any],
        callable: str,
        args: JSON = None,
        **options: Unpack[JobOptions],
    ) -> RunId:
        """Like :meth:`enqueue`, inside the caller's transaction on ``conn`` (committed or
        rolled back with it); publishes nothing."""
        flow, opts = self._job(callable, options)
        input_json = self._inserter.prepare_input(flow, args)
        return self._insert_tx(conn, flow, input_json, opts)

    def _job(self, call: str, options: JobOptions) -> tuple[Flow, RunOptions]:
        """The job flow of ``call`` (built once: :meth:`Inserter.job_flow`) and the checked
        run options of ``options``. Raises SubmitOptionError."""
        flow, rest = self._inserter.job_options(call, options)
        return flow, run_options(**rest)

    # -- submission: bulk ------------------------------------------------------------------

    def submit_many(
        self,
        flow: FlowLike,
        inputs: Iterable[JSON],
        *,
        item_options: Iterable[Mapping[str, Any] | None] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        **options: Unpack[SubmitOptions],
    ) -> list[RunId]:
        """Submit one run of ``flow`` per input of ``inputs`` (any iterable, read chunk by
        chunk); returns their ids in input order (each a :class:`RunId`; ``duplicate``
        when a ``unique_key`` matched an existing run, or an earlier item of the batch).

        ``options`` (those of :meth:`submit`) apply to every item; ``item_options``, one
        mapping (or None) per input, adds or overrides them per item (``queue``,
        ``priority``, ``run_at`` / ``delay``, ``unique_key`` (+ ``unique_window``,
        ``unique_states``), ``sequence``).

        Each chunk of ``chunk_size`` items is validated (input schema, payload limit,
        options) before anything of it is written, then written in one transaction with
        one set-based statement per table (items with a ``unique_key`` or a ``sequence``
        take the single-run insert, in item order, in the same transaction), and its
        wakeups published after its commit (one notification per chunk). Chunks commit one
        by one: when an item is invalid, or the database fails, the chunks before it stay
        committed and nothing of its own chunk is written.

        Raises BatchItemError (``.index`` of the bad item, ``.error`` the error
        :meth:`submit` would raise for it, ``.committed`` the runs of earlier chunks),
        FlowError, SubmitOptionError (a bad option of the whole batch, ``item_options``
        not one per input, or a deployed flow's name: only :meth:`submit` and
        :meth:`submit_tx` take one).
        """
        return self._many(_bulk_flow(flow), None, inputs, item_options, chunk_size, dict(options))

    def submit_many_tx(
        self,
        conn: psycopg.Connection[Any],
        flow: FlowLike,
        inputs: Iterable[JSON],
        *,
        item_options: Iterable[Mapping[str, Any] | None] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        **options: Unpack[SubmitOptions],
    ) -> list[RunId]:
        """Like :meth:`submit_many`, inside the caller's transaction on ``conn`` (every
        chunk in it: committed or rolled back with it; an autocommit ``conn`` gets one
        transaction for the whole call). An invalid item raises BatchItemError after the
        chunks before it were written into the caller's transaction: roll it back to write
        nothing. Publishes nothing (see :meth:`submit_tx`, :meth:`track_wakeups`)."""
        return self._many(_bulk_flow(flow), conn, inputs, item_options, chunk_size, dict(options))

    def enqueue_many(
        self,
        callable: str,
        args_list: Iterable[JSON],
        *,
        item_options: Iterable[Mapping[str, Any] | None] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        **options: Unpack[JobOptions],
    ) -> list[RunId]:
        """Enqueue one job of ``callable`` per ``args`` of ``args_list``, as
        :meth:`submit_many` does for a flow (same chunks, guarantees and errors).
        ``retry`` and ``timeout`` apply to the whole batch (one definition); the other
        options of :meth:`enqueue` may also be given per item in ``item_options``."""
        flow, base = self._inserter.job_options(callable, options)
        return self._many(flow, None, args_list, item_options, chunk_size, base)

    def enqueue_many_tx(
        self,
        conn: psycopg.Connection[Any],
        callable: str,
        args_list: Iterable[JSON],
        *,
        item_options: Iterable[Mapping[str, Any] | None] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        **options: Unpack[JobOptions],
    ) -> list[RunId]:
        """Like :meth:`enqueue_many`, inside the caller's transaction on ``conn`` (see
        :meth:`submit_many_tx`); publishes nothing."""
        flow, base = self._inserter.job_options(callable, options)
        return self._many(flow, conn, args_list, item_options, chunk_size, base)

    def _many(
        self,
        flow: Flow,
        conn: psycopg.Connection[Any] | None,
        inputs: Iterable[JSON],
        item_options: Iterable[Mapping[str, Any] | None] | None,
        chunk_size: int,
        options: dict[str, Any],
    ) -> list[RunId]:
        """The bulk submission of ``flow``: chunks validated then written, in a transaction
        each (``conn`` None) or in the caller's on ``conn``."""
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise SubmitOptionError("chunk_size", chunk_size, "must be an integer >= 1")
        base = run_options(**options)  # the batch's own options: an error without an index
        pairs = _pairs(inputs, item_options)
        ids: list[RunId] = []
        if conn is not None and conn.autocommit:  # no caller transaction: one of our own
            with conn.transaction():
                return self._many_in(flow, conn, pairs, chunk_size, options, base, ids)
        return self._many_in(flow, conn, pairs, chunk_size, options, base, ids)

    def _many_in(
        self,
        flow: Flow,
        conn: psycopg.Connection[Any] | None,
        pairs: Iterator[tuple[JSON, Mapping[str, Any] | None]],
        chunk_size: int,
        options: dict[str, Any],
        base: RunOptions,
        ids: list[RunId],
    ) -> list[RunId]:
        index = 0
        while True:
            chunk = list(itertools.islice(pairs, chunk_size))
            if not chunk:
                return ids
            prepared: list[tuple[str, RunOptions]] = []
            for value, extra in chunk:
                try:
                    opts = base if not extra else _item_options(options, extra)
                    prepared.append((self._inserter.prepare_input(flow, value), opts))
                except (InputValidationError, PayloadTooLargeError, SubmitOptionError) as exc:
                    raise BatchItemError(index, exc, committed=len(ids)) from exc
                index += 1
            if conn is None:
                with self._db.connection() as own:  # READ COMMITTED
                    got, wakeups = self._inserter.submit_many(own, flow, prepared)
                    self._publish(wakeups, own)  # committed: on the same connection
            else:
                got, wakeups = self._inserter.insert_many(conn, flow, prepared)
                self._hub.record(conn, wakeups)  # kept only when conn is tracked
            ids.extend(got)

    def _insert_tx(
        self, conn: psycopg.Connection[Any], flow: Flow, input_json: str, opts: RunOptions
    ) -> RunId:
        if conn.autocommit:  # no caller transaction to join: be atomic on our own
            with conn.transaction():
                run_id, wakeups = self._inserter.insert(conn, flow, input_json, opts)
        else:
            # Inside (or implicitly opening) the caller's transaction: the caller commits or
            # rolls back. (conn.transaction() here would commit an idle connection's work.)
            run_id, wakeups = self._inserter.insert(conn, flow, input_json, opts)
        self._hub.record(conn, wakeups)  # kept only when conn is tracked, never published here
        return run_id

    # -- submission: wakeups of caller-owned transactions ---------------------------------

    def track_wakeups(self, conn: psycopg.Connection[Any]) -> WakeupTracker:
        """Record the wakeups of the caller-owned-transaction calls made on ``conn`` from
        now on (:meth:`submit_tx`, and every other ``*_tx`` call), so that
        :meth:`publish_wakeups` can send them after the caller's commit (Engine Design:
        LISTEN/NOTIFY and the Polling Floor, "TrackWakeups").

        Returns a :class:`~cyclone_flow.notify.WakeupTracker`; as a context manager it
        publishes on a clean exit and discards on an exception::

            with client.track_wakeups(conn):
                with conn.transaction():
                    client.submit_tx(conn, flow, {"order_id": 42})

        or with explicit calls::

            client.track_wakeups(conn)
            client.submit_tx(conn, flow, {"order_id": 42})
            conn.commit()
            client.publish_wakeups(conn)

        Tracking an already tracked connection keeps its record. Untracked, a
        caller-owned transaction's work waits for the next poll (``poll_interval`` max at
        worst)."""
        return self._hub.track(conn, self.publish_wakeups)

    def publish_wakeups(self, conn: psycopg.Connection[Any]) -> None:
        """Publish the wakeups recorded on ``conn`` since :meth:`track_wakeups` and stop
        tracking it; call it after the caller's transaction committed (a no-op for an
        untracked connection). Publication is best-effort like every wakeup: a failure is
        logged at error level, never raised.

        Raises
        ------
        TransactionOpenError
            ``conn`` is still inside a transaction (not committed yet); nothing is
            published and the record is kept.
        """
        self._hub.publish_tracked(conn)

    # -- schedules -------------------------------------------------------------------------

    def sync_schedules(self, flow: FlowLike, *, now: datetime | None = None) -> SyncResult:
        """Make the flow file's ``schedules:`` the active schedules of that flow: each is
        created or updated by name (a paused one stays paused; its tick is kept when cron
        and timezone are unchanged) and the flow's other file-declared schedules are removed, in one
        transaction; an entry without ``name`` is named ``<flow>-<8 hex>`` from its cron,
        timezone and input, whatever its position. Schedules added with
        :meth:`add_schedule` are left alone. ``now`` pins the clock
        (tests). Raises FlowError, InputValidationError, SubmitOptionError,
        FlowRetiredError (a retired deployed flow: deploy it again first)."""
        return self._schedules.sync(flow, now=now)

    def add_schedule(
        self,
        flow: FlowLike,
        cron: str,
        *,
        timezone: str = "UTC",
        input: JSON = None,
        name: str | None = None,
        now: datetime | None = None,
    ) -> str:
        """Add (or update, by name) a schedule that submits a run of ``flow`` at every tick
        of ``cron`` read in ``timezone``; return its name (default: the flow's name and a
        digest of cron, timezone and input, so adding the same schedule twice is one).
        ``now`` pins the clock (tests). Raises FlowError, InputValidationError,
        SubmitOptionError, FlowRetiredError (a retired deployed flow)."""
        return self._schedules.add(flow, cron, timezone=timezone, input=input, name=name, now=now)

    def list_schedules(self) -> list[ScheduleRow]:
        """Every schedule of this schema, by name."""
        return self._schedules.rows()

    def get_schedule(self, name: str) -> ScheduleRow | None:
        """One schedule of this schema by name, None when there is none."""
        return self._schedules.get(name)

    def remove_schedule(self, name: str) -> None:
        """Delete a schedule (its past runs stay). Raises ScheduleNotFoundError."""
        self._schedules.remove(name)

    def pause_schedule(self, name: str) -> None:
        """Stop a schedule from submitting runs. Raises ScheduleNotFoundError."""
        self._schedules.pause(name)

    def resume_schedule(self, name: str, *, now: datetime | None = None) -> None:
        """Resume a paused schedule from the first tick after now (ticks missed while
        paused are skipped). Raises ScheduleNotFoundError, FlowRetiredError (its flow is a
        retired deployed flow)."""
        self._schedules.resume(name, now=now)

    def trigger_schedule(self, name: str, *, now: datetime | None = None) -> RunId:
        """Submit one run of the schedule ``name`` now, outside its cadence (a paused one
        too): inserted as its ticks are (the definition stored with the schedule, its
        input, the queue options), with ``schedule_id`` set and no ``scheduled_for``; it
        becomes the schedule's last run and the next tick is unchanged. ``now`` pins the
        clock. Returns the run id. Raises ScheduleNotFoundError, FlowRetiredError (its
        flow is a retired deployed flow)."""
        return self.schedule_scanner.trigger(name, now=now)

    @property
    def schedule_scanner(self) -> ScheduleScanner:
        """The schedule scanner (its ``run_once(now=None) -> ScheduleScannerResult`` is
        what the maintenance loop of a started client calls every ``sweep_interval``);
        built on first use."""
        if self._scanner is None:
            self._scanner = build.schedule_scanner(
                self._db, self._inserter, self.config, self._publish
            )
        return self._scanner

    # -- deployed flows --------------------------------------------------------------------

    def deploy(
        self,
        paths: PathsLike,
        *,
        by: str | None = None,
        prune: bool = False,
        force: bool = False,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> DeployResult:
        """Store the flows of ``paths`` (files, or folders searched as ``lint`` does) as
        new revisions and make them current, in one transaction: every flow of the call or
        none. Each :class:`~cyclone_flow.deployments.FlowPlan` of the result says what
        happened to one flow.

        The files are linted first (any error: nothing is written). A flow whose definition
        and source text equal its current revision's (and that is not retired) is
        ``unchanged``: no revision, but its schedules are synced back to its current
        revision when they drifted (one removed by hand is restored). Otherwise the next
        revision stores the source as in the file, the definition, ``by`` (default: the OS
        user), the git commit, path and dirty flag of the file; the flow's ``schedules:``
        are synced as :meth:`sync_schedules` does (recording the revision) and its other
        schedules (added by hand) repointed at it. The new ``input_schema`` is checked
        against the stored input of every schedule that will use it and of the flow's runs
        waiting to start (delayed, held by a sequence); a refused one is a
        :class:`~cyclone_flow.deployments.CompatProblem`, an error unless ``force``.
        ``prune``: deployed flows absent from ``paths`` are retired and their file schedules
        removed (status ``removed``). ``dry_run``: the plan computed by reads only, in one
        read-only snapshot (no lock taken, nothing written: ``applied`` False). ``now`` pins
        the schedules' clock (tests). Deploys serialise (``flow_lock_deploys``); submits are
        not blocked.

        Raises LintPathError (a missing path, a folder without flow files),
        DeployLintError (lint errors; two files declaring one flow: E060),
        CompatibilityError (``.problems``, ``.result``), SubmitOptionError (a schedule
        name taken by one added by hand).
        """
        return self._deployments.deploy(
            _path_list(paths), by=by, prune=prune, force=force, dry_run=dry_run, now=now
        )

    def diff(
        self, paths: PathsLike, *, prune: bool = False, now: datetime | None = None
    ) -> DeployResult:
        """What :meth:`deploy` of ``paths`` would do (a dry run: reads only, no lock; a
        role with SELECT alone can diff), with the compatibility problems in the result
        instead of raised (``result.changed``: ``diff``'s exit code). Raises
        LintPathError, DeployLintError, SubmitOptionError (as :meth:`deploy`)."""
        return self._deployments.diff(_path_list(paths), prune=prune, now=now)

    def list_deployed_flows(self) -> list[DeployedFlow]:
        """Every deployed flow by name, with its current revision's facts (deployed when,
        by whom, commit, kind, digest) and its runs of the last day."""
        return self._deployments.list_flows()

    def get_deployed_flow(self, name: str) -> DeployedFlow | None:
        """The deployed flow ``name`` (current revision, retired or not); None when it was
        never deployed."""
        return self._deployments.get_flow(name)

    def flow_history(self, name: str) -> list[Revision]:
        """Every revision of the deployed flow ``name``, newest first, each with its run
        count (``runs``; no source). Raises FlowNotDeployedError."""
        return self._deployments.history(name)

    def get_revision(self, name: str, revision: int | None = None) -> Revision:
        """Revision ``revision`` of the deployed flow ``name`` (None: the current one),
        with its ``source`` and ``definition``. Raises FlowNotDeployedError,
        RevisionNotFoundError."""
        return self._deployments.get_revision(name, revision)

    def load_revision(self, name: str, revision: int | None = None) -> Flow:
        """The :class:`Flow` built from the stored definition of revision ``revision``
        (None: current) of ``name``, for previews and graphs (its child flows are not
        loaded). Raises FlowNotDeployedError, RevisionNotFoundError."""
        return self._deployments.load_revision(name, revision)

    def diff_revisions(self, name: str, old: int, new: int | None = None) -> RevisionDiff:
        """Revisions ``old`` and ``new`` (None: the current one) of ``name`` compared: the
        node-level change and the unified diff of their sources. Raises
        FlowNotDeployedError, RevisionNotFoundError."""
        return self._deployments.diff_revisions(name, old, new)

    def rollback(
        self,
        name: str,
        to: int,
        *,
        by: str | None = None,
        force: bool = False,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> FlowPlan:
        """Make a new revision of ``name`` (kind ``rollback``, ``rollback_of`` ``to``) with
        revision ``to``'s source and definition current, its schedules synced back from
        that source's ``schedules:`` (and the flow's other schedules repointed), in one
        transaction; the compatibility check is :meth:`deploy`'s. A retired flow is active
        again. ``dry_run``: computed by reads only, not written. Raises FlowNotDeployedError,
        RevisionNotFoundError, CompatibilityError (unless ``force``)."""
        return self._deployments.rollback(name, to, by=by, force=force, dry_run=dry_run, now=now)

    def retire(self, name: str, *, by: str | None = None) -> RetireResult:
        """Retire the deployed flow ``name``: submits by name are refused
        (FlowRetiredError) and its schedules paused, in one transaction; runs already
        submitted go on. A later deploy or rollback makes it active again (its schedules
        stay paused: ``resume_schedule``). ``retired`` False: it was retired already.
        Raises FlowNotDeployedError."""
        return self._deployments.retire(name, by=by)

    # -- lifecycle and observers -----------------------------------------------------------

    def start(self, *, run_id: str | None = None) -> None:
        """Start the worker threads, claim loop, heartbeat, maintenance and (unless
        ``notify=False``) the listener, after building the worker machinery (output
        cache, ``tx_slots`` semaphore, group commit, executor, schedule scanner:
        :mod:`cyclone_flow.worker.build`), which a client that never starts does not build.

        ``run_id``: claim only the steps of that run (``cyclone-flow run`` works on its own
        run and leaves the others alone); the recovery sweep still serves everyone.

        Process-wide effects (the step logs' capture, ``worker/step_logs.py`` ``install()``;
        none with ``step_log_bytes=0``): ``sys.stdout`` and ``sys.stderr`` are replaced by
        per-thread proxies (what a handler's thread prints goes to its step's log, other
        threads write through to the streams replaced), and a capture handler is added to
        the root logger (and the ``cyclone_flow`` logger) for the records of handler
        threads. Counted across the started clients of the process: the shutdown of the
        last one restores both.
        """
        if self._worker is not None:
            return
        # With observers (e.g. metrics), the worker machinery reports every step event
        # through _emit: the on_step_event option first, then each observer.
        config = (
            dataclasses.replace(self.config, on_step_event=self._emit)
            if self._observers
            else self.config
        )
        self._worker = build.build_worker(
            self._db,
            config,
            self._worker_parts(),
            resolver=HandlerResolver(self._allow),
            publish=self._publish,
            inserter=self._inserter,
            scheduler=self.schedule_scanner,
            on_database_error=self._database_error if self._db_observers else None,
            only_run=parse_run_id(run_id) if run_id is not None else None,
        )
        self._worker.start()
        if self.config.notify:
            self._hub.listen()

    def _worker_parts(self) -> build.WorkerParts:
        """The output cache, ``tx_slots`` semaphore and group commit of this client's
        worker, built on first use (by :meth:`start`)."""
        if self._parts is None:
            self._parts = build.worker_parts(self._db, self.config)
        return self._parts

    def observe_steps(self, observer: Callable[[StepEvent], None]) -> None:
        """Also send every step event (see ``on_step_event``) to ``observer``, after the
        ``on_step_event`` option; an exception inside it is logged and ignored. For
        instrumentation such as :class:`cyclone_flow.metrics.Metrics`; call it before
        :meth:`start` (after it: ClientStateError)."""
        if self._worker is not None:
            raise ClientStateError("observe_steps()", "must be called before start()")
        self._observers.append(observer)

    def observe_database_errors(self, observer: Callable[[str], None]) -> None:
        """Call ``observer(where)`` once per connection-level database failure the started
        worker meets (``where``: ``claim``, ``heartbeat``, ``completion``, ``maintenance``
        or ``shutdown``; each also logged as one warning line). For instrumentation such as
        :class:`cyclone_flow.metrics.Metrics`; call it before :meth:`start` (after it:
        ClientStateError)."""
        if self._worker is not None:
            raise ClientStateError("observe_database_errors()", "must be called before start()")
        self._db_observers.append(observer)

    def _database_error(self, where: str) -> None:
        for observer in self._db_observers:
            call_hook(self.config.logger, observer, where)

    def _emit(self, event: StepEvent) -> None:
        call_hook(self.config.logger, self.config.on_step_event, event)
        for observer in self._observers:
            call_hook(self.config.logger, observer, event)

    @property
    def runtime(self) -> Worker | None:
        """The started worker machinery, or None before :meth:`start`; for its read-only
        counters (``claim_queries``, ``wakeups_forwarded``, ``wakeups_ignored``:
        docs/wakeups.md)."""
        return self._worker

    @property
    def worker(self) -> Worker | None:
        """Deprecated alias of :attr:`runtime` (one release; ``worker`` also names the
        heartbeat rows of :meth:`workers`, the ``workers`` option and the CLI command)."""
        warnings.warn(
            "Client.worker is deprecated: use Client.runtime", DeprecationWarning, stacklevel=2
        )
        return self._worker

    @property
    def listener(self) -> Listener | None:
        """The running listener, or None (``notify=False``, not needed yet, or shut
        down); for its read-only counters and state (``received``, ``connects``,
        ``backend_pid``, ``ready``: docs/wakeups.md)."""
        return self._hub.listener

    @property
    def publisher(self) -> Publisher:
        """What publishes this client's wakeups after each commit; for its read-only
        counters (``notifications``, ``batches``, ``failures``: docs/wakeups.md)."""
        return self._hub.publisher

    def workers(self, *, now: datetime | None = None) -> list[WorkerRow]:
        """The started clients of this schema, from their heartbeat rows (live ones first,
        then by client id): each one's host, pid, queues and worker threads, version, start
        and last beat. ``live``: heartbeated within one ``lease_ttl`` of the database's now
        (``now`` pins it, for tests); a dead worker's row stays until the worker reaper
        deletes it, 10 x its ``lease_ttl`` after its last beat."""
        with self._db.session() as s:
            return workers.worker_list(s, now=now)

    def in_flight(self) -> int:
        """How many steps this client's worker holds a lease on now (executing, or done and
        waiting for the group commit); 0 before :meth:`start`."""
        worker = self._worker
        return worker.in_flight() if worker is not None else 0

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop claiming, let in-flight handlers finish for up to ``timeout`` seconds, tell
        the rest to stop and release their leases; stop the listener; seal the wakeup
        buffer, wait for a publication in flight and publish what is left; then close the
        pool if this client opened it. Safe to call twice.

        Required even for a client that only submits and never called :meth:`start` when it
        has a ``notify_coalesce`` window: its last wakeups may still be buffered (Client
        Options: "Producer-only clients must be shut down")."""
        if self._closed:
            return
        self._closed = True
        if self._worker is not None:
            self._worker.shutdown(timeout)
        self._hub.shutdown(timeout)  # the listener, then the wakeups still buffered
        if self._owns_pool:
            self._pool.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- run reads (and the queue and health reads of the schema) ------------------------

    def get_run(self, run_id: str) -> Run:
        """The run's state, input, output and error; raises RunNotFoundError, and
        ``psycopg_pool.PoolTimeout`` when no pool connection comes within
        :data:`~cyclone_flow.db.errors.BRIEF_POOL_WAIT_S` (5 s: the database is out of reach)."""
        rid = parse_run_id(run_id)
        with self._db.session(wait=BRIEF_POOL_WAIT_S) as s:
            run = runs.run_get(s, run_id=rid)
        if run is None:
            raise RunNotFoundError(rid)
        return run

    def resolve_run_id(self, run_id: str) -> str:
        """The full id of the run that ``run_id`` names: a full run id (returned
        normalised, not looked up) or the start of one, at least
        :data:`MIN_RUN_ID_PREFIX` hex digits (``a3834a92``, as the CLI's progress shows
        it; hyphens where the id has them), looked up in one primary-key range read.

        Raises RunNotFoundError when no run id starts so (or the text is neither; its
        RunIdTooShortError when the text is hex digits, too few), and AmbiguousRunIdError
        (listing the first ten) when several do."""
        try:
            return parse_run_id(run_id)
        except RunNotFoundError:
            pass
        bounds = prefix_bounds(run_id)
        if bounds is None:
            if is_short_hex(str(run_id)):
                raise RunIdTooShortError(str(run_id), MIN_RUN_ID_PREFIX)
            raise RunNotFoundError(str(run_id))
        low, high = bounds
        with self._db.session() as s:
            found = runs.run_list_ids_in_range(
                s, low=low, high=high, limit=AMBIGUOUS_RUN_IDS_SHOWN + 1
            )
        if not found:
            raise RunNotFoundError(run_id)
        if len(found) > 1:
            shown_ids = found[:AMBIGUOUS_RUN_IDS_SHOWN]
            raise AmbiguousRunIdError(run_id, shown_ids, more=len(found) > len(shown_ids))
        return found[0]

    def list_steps(self, run_id: str, *, items: bool = True) -> list[Step]:
        """Every step of the run (fan-out item steps only when ``items``); raises
        RunNotFoundError for an unknown run (``PoolTimeout`` as :meth:`get_run`)."""
        rid = parse_run_id(run_id)
        with self._db.session(wait=BRIEF_POOL_WAIT_S) as s:
            if runs.run_get(s, run_id=rid) is None:
                raise RunNotFoundError(rid)
            return steps.step_list(s, run_id=rid, items=items)

    def get_step_output(
        self, run_id: str, node: str, item: int | None = None, *, max_bytes: int | None = None
    ) -> NodeOutput:
        """The output of top-level node ``node`` of the run (a fan-out node's: the list of
        its item outputs), or with ``item`` that of its fan-out item ``item`` (0-based), as
        a :class:`~cyclone_flow.db.rows.NodeOutput`: ``output`` (None until ``has_output``:
        the step completed), ``state``, ``output_bytes`` and ``truncated`` (the value left
        out: its JSON text is over ``max_bytes``; None: no cap). An item of a fan-out node
        whose items are not created yet comes back with the node's state and no output.

        Raises RunNotFoundError for an unknown run, NodeNotFoundError for a node the run
        does not have, an ``item`` of a node that is no fan-out node or past its items
        (``PoolTimeout`` as :meth:`get_run`)."""
        rid = parse_run_id(run_id)
        with self._db.session(wait=BRIEF_POOL_WAIT_S) as s:
            if item is not None and item >= 0 and storable(node):
                found = steps.step_get_output_shown(
                    s, run_id=rid, node=node, item=item, max_bytes=max_bytes
                )
                if found is not None:
                    return found
            top = None
            if storable(node):
                top = steps.step_get_output_shown(s, run_id=rid, node=node, max_bytes=max_bytes)
            if top is None:
                if runs.run_get(s, run_id=rid) is None:
                    raise RunNotFoundError(rid)
                known = ", ".join(x.node for x in steps.step_list(s, run_id=rid, items=False))
                raise NodeNotFoundError(
                    rid, node, f"run {rid} has no node {shown(node)} (its nodes: {known})"
                )
        if item is None:
            return top
        if top.type != "fan_out":
            raise NodeNotFoundError(
                rid,
                node,
                f"node {shown(node)} is no fan-out node ({top.type}): it has no items",
                item,
            )
        if top.items_total is not None:
            raise NodeNotFoundError(
                rid,
                node,
                f"node {shown(node)} has no item {item} (items 0 to {top.items_total - 1})"
                if top.items_total
                else f"node {shown(node)} has no item {item} (it has no items)",
                item,
            )
        # the fan-out node has not made its items yet: the item has its node's state
        return NodeOutput(
            node=f"{node}[{item}]",
            type="fan_out_item",
            state=top.state,
            parent_node=node,
            item_index=item,
            items_total=None,
            output=None,
            output_bytes=None,
            truncated=False,
        )

    def count_items(self, run_id: str) -> dict[str, dict[str, int]]:
        """Item counts of each started fan-out node of the run: node -> step state ->
        count (e.g. ``{"ship_each": {"completed": 40, "running": 8, "pending": 52}}``;
        ``PoolTimeout`` as :meth:`get_run`)."""
        with self._db.session(wait=BRIEF_POOL_WAIT_S) as s:
            return steps.step_count_items(s, run_id=parse_run_id(run_id))

    def list_runs(
        self,
        *,
        flow: str | None = None,
        state: str | None = None,
        limit: int = 50,
        revision: int | None = None,
    ) -> list[Run]:
        """The most recent runs, newest first (of ``flow``, in ``state``, submitted with
        the deployed ``revision`` when given: one out of range, below 1 or above
        ``2**31 - 1``, matches no run)."""
        if flow is not None and not storable(flow):
            return []  # no flow has such a name
        if revision is not None and not is_revision(revision):
            return []  # no revision has such a number
        with self._db.session() as s:
            return runs.run_list(s, flow=flow, state=state, limit=limit, revision=revision)

    def explain(
        self, run_id: str, *, items: bool = False, now: datetime | None = None
    ) -> dict[str, Waiting]:
        """Why each step of the run that is neither running nor finished waits: node ->
        :class:`~cyclone_flow.explain.Waiting` (a ``reason`` code, a one-line
        ``text``, ``claimable_at`` and the fields of that reason: unfinished needs, the
        backoff or delay, the awaited signal and its deadline, the child run, the
        ``max_parallel`` bound, the run holding its sequence, no live worker for its
        queue). Read in one snapshot; ``items``: fan-out items too; ``now`` pins the clock
        (tests). Raises RunNotFoundError."""
        rid = parse_run_id(run_id)
        with self._db.session() as s:
            snap = explain.read_snapshot(s, rid, items=items, now=now)
        if snap is None:
            raise RunNotFoundError(rid)
        return explain.explain(snap)

    def run_view(
        self,
        run_id: str,
        *,
        items: bool = False,
        logs: int = 0,
        definition: bool = False,
        now: datetime | None = None,
    ) -> run_view.RunView:
        """The run as one snapshot sees it, for a display (``status``, ``status --watch``,
        ``graph --run``, ``run --json``, ``submit --wait --json``, ``rerun --wait --json``,
        ``run``'s progress, the dashboard's run page): a frozen
        :class:`~cyclone_flow.run_view.RunView` with the run, its steps (fan-out items
        when ``items``), its item progress, why its waiting steps wait (as
        :meth:`explain`), its :class:`~cyclone_flow.db.rows.QueueInfo`, the database's
        ``now``, its last ``logs`` log lines and, with ``definition``, the flow document it
        was submitted with; all read in one read-only REPEATABLE READ transaction.
        ``run_id`` is a full run id, as for :meth:`get_run` (:meth:`resolve_run_id`
        resolves a prefix); ``now`` pins the clock (tests). Raises RunNotFoundError, and
        ``PoolTimeout`` as :meth:`get_run`."""
        rid = parse_run_id(run_id)
        with self._db.session(wait=BRIEF_POOL_WAIT_S) as s:
            view = run_view.read_view(
                s, rid, items=items, logs=logs, definition=definition, now=now
            )
        if view is None:
            raise RunNotFoundError(rid)
        return view

    def list_step_logs(
        self,
        run_id: str,
        *,
        node: str | None = None,
        attempt: int | None = None,
        after: int = 0,
        limit: int = 10_000,
    ) -> list[StepLogLine]:
        """What the run's handlers logged and printed (``ctx.log``, the ``logging`` records
        and the stdout/stderr of the handler's thread), up to ``limit`` lines in write
        order: of ``node`` (a fan-out node: its items too) and ``attempt`` when given,
        with an id above ``after`` (to follow: pass the last id seen). A running
        attempt's lines are written every ``step_log_flush_interval`` (a crash loses only
        those not written yet), the rest right after its completion or failure is
        recorded, at most ``step_log_bytes`` per attempt. Raises RunNotFoundError."""
        rid = parse_run_id(run_id)
        with self._db.session() as s:
            lines = step_logs.step_log_list(
                s, run_id=rid, node=node, attempt=attempt, after=after, limit=limit
            )
            if not lines and runs.run_get(s, run_id=rid) is None:
                raise RunNotFoundError(rid)
        return lines

    def list_step_log_tail(self, run_id: str, limit: int = 5) -> list[StepLogLine]:
        """The last ``limit`` log lines of the run (any node), oldest first."""
        with self._db.session() as s:
            return step_logs.step_log_list_tail(s, run_id=parse_run_id(run_id), limit=limit)

    def get_run_definition(self, run_id: str) -> dict[str, Any]:
        """The flow document the run was submitted with; raises RunNotFoundError."""
        rid = parse_run_id(run_id)
        with self._db.session() as s:
            definition = runs.run_get_definition(s, run_id=rid)
        if definition is None:
            raise RunNotFoundError(rid)
        return definition

    def get_queue_info(self, run_id: str) -> dict[str, Any] | None:
        """The unique/sequence/schedule columns of the run by name (``unique_key``,
        ``unique_held``, ``unique_states``, ``sequence_key``, ``sequence_pos``,
        ``sequence_held``, ``schedule_id``, ``scheduled_for``); None for an unknown run."""
        with self._db.session() as s:
            info = runs.run_get_queue_info(s, run_id=parse_run_id(run_id))
        return None if info is None else info.as_dict()

    def count_active(self, queues: Sequence[str]) -> int:
        """Steps of ``queues`` (queue names) that are available (now or at a later
        ``scheduled_at``) or running, by any worker of this schema."""
        with self._db.session() as s:
            return steps.step_count_active(s, queues=queues)

    def count_active_other_calls(self, queues: Sequence[str]) -> tuple[int, dict[str, str]]:
        """:meth:`count_active` without the available steps of the calls this client's
        worker gives back (it cannot import them, or may not run them: docs/failures.md):
        ``(count, {call: the reason of its last give-back})``. ``(0, ...)``: nothing is
        left that this worker can run (``worker --exit-when-idle``)."""
        worker = self._worker
        failed = worker.executor.backoff.failed() if worker is not None else {}
        with self._db.session() as s:
            if not failed:
                return steps.step_count_active(s, queues=queues), failed
            count = steps.step_count_active_other_calls(s, queues=queues, skip_calls=sorted(failed))
        return count, failed

    def queue_stats(self) -> list[QueueStats]:
        """Per queue with available or running steps (any worker of this schema): steps
        ``available`` now (the depth), ``scheduled`` later (e.g. retries in backoff),
        ``running``, and ``oldest_available_s``, seconds the oldest claimable step has
        waited. Queues without such steps are left out. What the metrics' queue gauges
        read (:meth:`cyclone_flow.metrics.Metrics.watch_queues`)."""
        with self._db.session() as s:
            return steps.step_count_by_queue(s)

    def health(self, thresholds: Thresholds | None = None) -> HealthReport:
        """The health advisor's report on this client's schema (``cyclone-flow doctor``):
        the hot tables' vacuum state, the transactions and slots holding the xmin horizon
        back, the claim index and the claim's cost on the real table, backlog ages,
        reclaimed steps, held sequences, leases of dead clients, the schema version and the
        connection budget, with one :class:`~cyclone_flow.advisor.Advice` per problem
        (``report.healthy``: none). Read-only, in autocommit; ``thresholds`` default to
        :class:`~cyclone_flow.advisor.Thresholds`."""
        with self._db.connection(wait=BRIEF_POOL_WAIT_S) as conn, autocommit(conn):
            version = schema_version(conn, self.config.schema)
            return advisor.check(
                Session(conn, self._db.q),
                schema=self.config.schema,
                schema_version=version,
                code_version=latest_version(),
                pool_reserve=POOL_RESERVE,
                thresholds=thresholds,
                owner=self.config.client_id,
            )

    # Deprecated aliases (one release): the noun-first names of the reads above.
    item_progress = _Deprecated("count_items")
    queue_info = _Deprecated("get_queue_info")
    step_logs = _Deprecated("list_step_logs")
    step_log_tail = _Deprecated("list_step_log_tail")
    run_definition = _Deprecated("get_run_definition")
    failed_run_ids = _Deprecated("list_failed_run_ids")

    # -- dashboard reads -------------------------------------------------------------------

    @property
    def reads(self) -> Reads:
        """The reads that exist for the dashboard (:class:`~cyclone_flow.reads.Reads`:
        ``queue_throughput``, ``list_runs_page``, ``count_runs_by_state``, ``list_flows``,
        ``get_flow``, ``count_leases``, ``list_reclaimed_steps``,
        ``list_runs_past_deadline``, ``list_held_sequences``, ``list_items``,
        ``step_log_node_tail``). ``Client.<name>`` still works for one release, with a
        DeprecationWarning."""
        return self._reads

    # Deprecated aliases (one release): Client.<name> is Client.reads.<name>, with a warning.
    queue_throughput = _Deprecated()
    list_runs_page = _Deprecated()
    count_runs_by_state = _Deprecated()
    list_flows = _Deprecated()
    get_flow = _Deprecated()
    count_leases = _Deprecated()
    list_reclaimed_steps = _Deprecated()
    list_runs_past_deadline = _Deprecated()
    list_held_sequences = _Deprecated()
    list_items = _Deprecated()
    step_log_node_tail = _Deprecated()

    # -- operator actions (and the previews of retry --all-failed and purge) ---------------

    def cancel(self, run_id: str, reason: str = "cancelled by operator") -> bool:
        """Cancel a running run and every non-terminal step, with the whole trees of its
        running child runs, in one transaction under the run lock; handlers still running
        learn it on their next heartbeat and their late completions are ignored. A
        cancelled child run discards its parent's node (kind ``child_failed``). A failed
        run of a sequence can be cancelled too, which releases the run held behind it.
        Returns False when the run was already terminal (a racing completion won: exactly
        one wins). Raises RunNotFoundError."""
        rid = parse_run_id(run_id)
        reason = printable(str(reason)) or ""
        with transaction(self._db, self._publish) as tx:
            done, cancelled = operator.cancel_run(tx, rid, reason)
        if done:
            for node in cancelled:
                self._emit(
                    StepEvent(EventKind.CANCELLED, rid, node, error=reason, error_kind="cancelled"),
                )
        return done

    def retry(self, run_id: str, node: str | None = None) -> list[str]:
        """Operator retry of a failed or cancelled run: its discarded steps (all, or only
        ``node``) and every cancelled step go back to pending/available with attempts and
        reclaims reset; the run is running again. Returns the nodes reset.
        Raises RunNotFoundError, RunStateError."""
        if node is not None and not storable(node):
            node = printable(node)  # spelled out: no node has that name (RunStateError)
        with transaction(self._db, self._publish) as tx:
            return operator.retry_run(tx, parse_run_id(run_id), node)

    def rerun(
        self,
        run_id: str,
        from_node: str | Sequence[str] | None = None,
        input: JSON = None,
        *,
        input_patch: JSON = None,
        failed: bool = False,
        force: bool = False,
    ) -> str:
        """Rerun the finished top run ``run_id`` from ``from_node`` (a node name or
        several), reusing what it finished; returns the new run's id.

        In one transaction a new run of the same stored definition is written, linked to
        the original (``Run.rerun_of``): every node that is not a ``from`` node nor
        downstream of one takes over the original's output without running (its step is
        ``completed``, or ``skipped`` as it was, with ``Step.reused_from`` the source
        step; a fan-out node keeps its items' outputs, a child node its child run's
        output); the ``from`` nodes and their descendants run again (a child node among
        them starts a new child run). ``failed`` adds every discarded or cancelled node
        to ``from_node``. ``input`` replaces the run input (None: the original's),
        ``input_patch`` merges into it (RFC 7396 JSON Merge Patch); either is checked
        against the flow's ``input_schema``. A node to reuse whose input the new input
        would change is refused, unless ``force`` reruns it too.

        Raises RunNotFoundError; RunStateError (the run is running or a child run, an
        unknown node, nothing to rerun); RerunRefusedError (``.nodes``: a node to reuse
        did not complete, or a changed input would change its input); InputValidationError
        and PayloadTooLargeError (a bad new input); nothing is written then."""
        if input is not None and input_patch is not None:
            raise SubmitOptionError("input", input, "give input or input_patch, not both")
        names = [from_node] if isinstance(from_node, str) else list(from_node or ())
        names = [n if storable(n) else (printable(n) or "") for n in names]
        rid = parse_run_id(run_id)
        limit = self.config.payload_limits.input_bytes
        with transaction(self._db, self._publish) as tx:
            kwargs: dict[str, Any] = {}
            if input is not None or input_patch is not None:
                new_input = input
                if input_patch is not None:
                    original = runs.run_get(tx, run_id=rid)
                    if original is None:
                        raise RunNotFoundError(rid)
                    new_input = reruns.merge_patch(original.input, input_patch)
                encode_payload("input", new_input, limit)  # before anything is written
                kwargs["new_input"] = new_input
            plan = reruns.rerun(tx, rid, names, failed=failed, force=force, **kwargs)
        return plan.run_id

    def list_failed_run_ids(self, flow: str | None = None) -> list[str]:
        """The ids of the failed top runs (of ``flow`` when given), oldest first: what
        :meth:`retry_all` would retry now (``retry --all-failed`` previews them)."""
        if flow is not None and not storable(flow):
            return []  # no flow has such a name
        with self._db.session() as s:
            return runs.run_list_failed(s, flow=flow)

    def retry_all(
        self, flow: str | None = None, *, only: Collection[str] | None = None
    ) -> list[str]:
        """:meth:`retry` every failed run (of ``flow`` when given; with ``only``, those
        of these ids only, e.g. the ones :meth:`list_failed_run_ids` returned for a preview);
        returns their ids, oldest first. A run retried or no longer failed meanwhile is
        skipped."""
        retried: list[str] = []
        failed = self.list_failed_run_ids(flow)
        if only is not None:
            wanted = set(only)
            failed = [rid for rid in failed if rid in wanted]
        for rid in failed:
            try:
                self.retry(rid)
            except RunStateError:
                continue  # retried or cancelled meanwhile by someone else
            retried.append(rid)
        return retried

    def purge(self, older_than: float, *, batch_size: int = RETENTION_BATCH_SIZE) -> int:
        """Delete every completed, failed or cancelled run whose ``finished_at`` is more
        than ``older_than`` seconds ago (database clock), with its steps and deps, in
        batches of ``batch_size`` runs; running runs are never touched (Client Options:
        WithRetentionSweep). Returns the number of runs deleted. Safe while other clients
        purge too. Raises ConfigError for a non-positive age or a bad batch size."""
        config = _purge_config(older_than, batch_size)
        return retention.purge(self._db, config, self.config.logger)

    def count_purgeable(self, older_than: float) -> tuple[int, int]:
        """``(runs, steps)`` that :meth:`purge` with ``older_than`` would delete now."""
        _purge_config(older_than, RETENTION_BATCH_SIZE)
        with self._db.session() as s:
            return runs.run_count_purgeable(s, age_us=int(older_than * 1_000_000))

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
        if not is_signal_name(name):
            raise InputValidationError(
                "", SIGNAL_NAME_RULE, subject=f"invalid signal name {shown(name)}"
            )
        subject = f"payload of signal {name!r}"
        try:
            text = encode_payload("signal", payload, self.config.payload_limits.signal_bytes)
        except Unencodable as exc:
            raise InputValidationError("", exc.reason, subject=subject) from None
        with transaction(self._db, self._publish) as tx:
            node = signals.deliver_signal(tx, rid, name, text)
        emit_engine_events(self.config.logger, self._emit, tx.effects.events)
        return node

    # -- waiting ---------------------------------------------------------------------------

    def wait(self, run_id: str, timeout: float | None = None) -> Run:
        """Block until the run is terminal (completed, failed or cancelled) and return its
        status; ``timeout`` in seconds (None: no limit).

        Woken by ``cyclone_run_done`` through this client's listener (started on first use
        unless ``notify=False``), and polling the run within ``poll_interval`` all the
        same, so a lost notification delays the answer by at most ``poll_interval`` max
        (Engine Design: LISTEN/NOTIFY and the Polling Floor). Losing the database is not
        an answer: the wait goes on through a restart (see Raises).

        Raises
        ------
        RunNotFoundError
            No such run (or ``run_id`` is not a UUID).
        WaitTimeoutError
            ``timeout`` seconds passed first (also a ``TimeoutError``); the run goes on.
        ValueError
            ``timeout`` is negative or not a number.
        psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout
            The database stayed out of reach until ``timeout`` passed, or for
            :data:`~cyclone_flow.db.errors.OUTAGE_GRACE_S` (60 s) without a timeout (counted
            from the start of the first failed look, which waits up to
            :data:`~cyclone_flow.db.errors.BRIEF_POOL_WAIT_S` for a connection): a restart or a
            shorter outage is ridden out (retried with a backoff of 0.1 s doubling to 1 s,
            the pool replacing the connections it killed); the run goes on.
        psycopg.Error
            Any other database error (e.g. the schema was dropped).
        """
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0
        ):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        rid = parse_run_id(run_id)
        return self._hub.wait(
            rid,
            lambda: self.get_run(rid),
            timeout=timeout,
            poll_interval=self.config.poll_interval,
            listen=self.config.notify,
        )

    # -- publishing (what every transition of this client calls after its commit) ---------

    def _publish(self, wakeups: Wakeups, conn: psycopg.Connection[Any] | None = None) -> None:
        """Publish after a commit (waiters of this client are told at once), on ``conn``
        when given (idle, just committed); a failure is logged at error level and loses
        no work (the polling floor finds it). The transitions and services of this client
        call it after their commits."""
        self._hub.publish(wakeups, conn)


_ITEM_OPTIONS = frozenset(SubmitOptions.__annotations__)


PathsLike = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
"""The files and folders of :meth:`Client.deploy` / :meth:`Client.diff`: one path or many."""


def _path_list(paths: PathsLike) -> list[str]:
    """``paths`` as a list of path strings (one ``str`` or path object is one path, not a
    sequence of characters)."""
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def _bulk_flow(flow: FlowLike) -> Flow:
    """The checked flow of a bulk submission (:func:`check_flow`). Raises
    SubmitOptionError for a deployed flow's name, FlowError."""
    if isinstance(flow, str) and is_flow_reference(flow):
        raise SubmitOptionError(
            "flow",
            flow,
            "a deployed flow name is accepted by submit() and submit_tx() only; give "
            "submit_many a flow file or a Flow",
        )
    return check_flow(flow)


def _pairs(
    inputs: Iterable[JSON], item_options: Iterable[Mapping[str, Any] | None] | None
) -> Iterator[tuple[JSON, Mapping[str, Any] | None]]:
    """``(input, item options)`` per item; raises SubmitOptionError when ``item_options``
    has not one entry per input (told when the shorter one ends)."""
    if item_options is None:
        for value in inputs:
            yield value, None
        return
    sentinel = object()
    for value, extra in itertools.zip_longest(inputs, item_options, fillvalue=sentinel):
        if value is sentinel or extra is sentinel:
            raise SubmitOptionError(
                "item_options", "...", "must have exactly one mapping (or None) per input"
            )
        yield value, extra  # type: ignore[misc]


def _item_options(options: Mapping[str, Any], extra: Mapping[str, Any]) -> RunOptions:
    """The options of one item: the batch's ``options`` with its ``extra`` over them.
    Raises SubmitOptionError."""
    if not isinstance(extra, Mapping):
        raise SubmitOptionError("item_options", extra, "each entry must be a mapping or None")
    for key in extra:
        if key not in _ITEM_OPTIONS:
            why = (
                "applies to the whole batch (one definition): give it to enqueue_many"
                if key in ("retry", "timeout")
                else f"is not a per-item option (those: {', '.join(sorted(_ITEM_OPTIONS))})"
            )
            raise SubmitOptionError(str(key), extra[key], why)
    merged = {**options, **extra}
    if "run_at" in extra and "delay" not in extra:
        merged.pop("delay", None)  # an item's run_at replaces the batch's delay
    elif "delay" in extra and "run_at" not in extra:
        merged.pop("run_at", None)
    return run_options(**merged)


def migrate(database: str, /, *, schema: str = "public", prepare: bool = True) -> list[int]:
    """Apply the missing migrations of ``schema`` on the database at URL ``database``;
    return the versions applied now (Engine Design: Schema Isolation and Migrations).
    Safe from many processes at once; ``prepare=False`` prepares no statement on the
    server (PgBouncer in transaction mode). Raises ConfigError for a bad schema name and
    psycopg.OperationalError when the database cannot be reached."""
    with psycopg.connect(database, **_connect_kwargs(prepare)) as conn:
        return migrate_schema(conn, schema)


def check_schema(database: str, /, *, schema: str = "public", prepare: bool = True) -> None:
    """Check, on one short connection to the database at URL ``database``, that every
    migration this code ships is applied to ``schema`` (what a :class:`Client` checks
    when it is made; ``worker --processes`` checks it once before starting its children).
    Raises SchemaOutdatedError when one is not, ConfigError for a bad schema name and
    psycopg.OperationalError when the database cannot be reached."""
    validate_schema_name(schema)
    with psycopg.connect(database, **_connect_kwargs(prepare)) as conn:
        check_schema_version(conn, schema)


def preview_submit(
    flow: FlowLike,
    input: JSON = None,
    *,
    payload_limits: PayloadLimits | None = None,
    **options: Unpack[SubmitOptions],
) -> RunPreview:
    """What :meth:`Client.submit` would write for ``flow``, ``input`` and ``options``,
    without a database (``submit --dry-run``): the flow linted, the input validated (after
    filling defaults) against ``payload_limits.input_bytes`` (default 1 MiB), the options
    checked, and the steps with their queue, priority, needs and first state
    (:class:`~cyclone_flow.inserter.RunPreview`). Nothing is written or connected to.

    Raises what submit raises for the same arguments: FlowError, InputValidationError,
    PayloadTooLargeError, SubmitOptionError.
    """
    opts = run_options(**options)
    limits = payload_limits or PayloadLimits()
    return preview_run(flow, input, opts, limits.input_bytes)


def plan_submit(
    flow: FlowLike,
    input: JSON = None,
    *,
    payload_limits: PayloadLimits | None = None,
    **options: Unpack[SubmitOptions],
) -> RunPreview:
    """Deprecated alias of :func:`preview_submit` (one release)."""
    warnings.warn(
        "cyclone_flow.client.plan_submit is deprecated: use preview_submit",
        DeprecationWarning,
        stacklevel=2,
    )
    return preview_submit(flow, input, payload_limits=payload_limits, **options)


def __getattr__(name: str) -> Any:
    # the deprecated module names of the dry-run preview
    if name == "RunPlan":
        warnings.warn(
            "cyclone_flow.client.RunPlan is deprecated: use RunPreview",
            DeprecationWarning,
            stacklevel=2,
        )
        return RunPreview
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _connect_kwargs(prepare: bool) -> dict[str, Any]:
    """``psycopg.connect`` keywords of a one-off connection: a connect timeout and, with
    ``prepare`` False, no server-side prepared statements."""
    kwargs: dict[str, Any] = {"connect_timeout": 10}
    if not prepare:
        kwargs["prepare_threshold"] = None
    return kwargs


def _purge_config(older_than: float, batch_size: int) -> RetentionConfig:
    if isinstance(older_than, bool) or not isinstance(older_than, int | float):
        raise ConfigError(f"older_than must be a number of seconds, got {older_than!r}")
    if not older_than > 0:
        raise ConfigError(f"older_than must be above 0 seconds, got {older_than!r}")
    config = validate_retention(RetentionConfig(default_age=older_than, batch_size=batch_size))
    assert config is not None
    return config

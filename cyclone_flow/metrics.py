"""Prometheus metrics of a worker (Client Options: Observability; ``cyclone-flow worker
--metrics-port``).

This module is the only one that imports ``prometheus_client``; the engine never does. A
:class:`Metrics` receives the client's step events through
:meth:`cyclone_flow.Client.observe_steps` (the same events as the ``on_step_event``
option) and keeps counters and histograms per queue; a collector reads queue depth and the
age of the oldest claimable step from the database at each scrape.

Library users can do what the CLI does::

    metrics = Metrics()
    client.observe_steps(metrics.observe)
    client.observe_database_errors(metrics.observe_database_error)
    metrics.watch_queues(client, client.config.worker_queues)
    server = serve_metrics(metrics, 9464)

Series (``queue`` label on all but one; ``error_kind`` where it says so):

- ``cyclone_steps_claimed_total``, ``cyclone_steps_completed_total`` (also the fan-out,
  child and wait_signal nodes the engine completes, on the node's queue),
  ``cyclone_steps_retried_total`` (failed attempts with attempts left),
  ``cyclone_steps_failed_total{error_kind}`` (every failed attempt),
  ``cyclone_steps_discarded_total{error_kind}`` (dead letters; a fan-out node discarded
  because one of its items was, ``item_failed``, is not a second one: the item was
  counted),
  ``cyclone_steps_reclaimed_total`` (expired leases put back by this client's sweep)
- ``cyclone_database_errors_total{where}`` (no ``queue`` label): connection-level
  database failures this worker met and rode out (the database restarted or was out of
  reach), by where: ``claim``, ``heartbeat``, ``completion``, ``maintenance``,
  ``shutdown`` (:meth:`cyclone_flow.Client.observe_database_errors`)
- ``cyclone_step_handler_duration_seconds`` histogram: the handler's run time
- ``cyclone_step_start_latency_seconds`` histogram: claim-to-start latency, the time a
  step waited claimable (from ``scheduled_at``) until a claim started its attempt
- ``cyclone_queue_available_steps`` (depth), ``cyclone_queue_scheduled_steps`` (available
  later, e.g. in backoff), ``cyclone_queue_running_steps``,
  ``cyclone_queue_oldest_available_age_seconds``: gauges read from the database, the same
  for every worker of a schema (aggregate them with ``max``)
- ``cyclone_health_*`` (:meth:`Metrics.watch_health`): the health advisor's figures, read
  at most once a minute (``HEALTH_TTL_S``): ``dead_tuples{table}``, ``live_tuples{table}``,
  ``autovacuum_enabled{table}``, ``last_vacuum_age_seconds{table}``,
  ``oldest_xmin_transaction_age_seconds``, ``xmin_holders``, ``claim_index_bloat_ratio``,
  ``claim_index_bytes``, ``claim_cost{queue}``, ``claim_buffers{queue}``,
  ``reclaimed_steps``, ``held_runs``, ``orphaned_leases``,
  ``schema_migrations_behind``, ``connections{kind}`` and ``warnings{check}``: the same for
  every worker of a schema (docs/observability.md)

Counters and histograms count what this process did: sum them over the fleet. No
``_created`` series are exported (the start time of each labelled series, which
prometheus_client adds by default): only the registry of a :class:`Metrics` is affected.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase

from cyclone_flow.advisor import CHECKS, ClaimProbe, HealthReport, Thresholds
from cyclone_flow.db.rows import QueueStats, TableHealth
from cyclone_flow.events import StepEvent
from cyclone_flow.states import ErrorKind

DURATION_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0,
)  # fmt: skip
LATENCY_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
    3600.0,
)  # fmt: skip
HEALTH_TTL_S = 60.0
"""Seconds a health report is served from memory (:class:`HealthCollector`): the advisor's
reads are cheap but not free, and scrapes may come every few seconds."""


UNKNOWN_QUEUE = "unknown"  # a cancelled step's event does not say its queue
ITEM_FAILED = str(ErrorKind.ITEM_FAILED)
"""The error kind of a fan-out node discarded because an item was: that item was the dead
letter (counted on its queue), so the node's roll-up is not counted as a second one."""


class QueueSource(Protocol):
    """Where the queue gauges are read: a :class:`cyclone_flow.Client`
    (:meth:`~cyclone_flow.Client.queue_stats`)."""

    def queue_stats(self) -> list[QueueStats]: ...


class Metrics:
    """The metrics of one client, in ``registry`` (a new one by default, so several
    clients in one process do not collide)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = None  # registered below, through _WithoutCreated
        self.claimed = Counter(
            "cyclone_steps_claimed", "Steps claimed by this worker.", ["queue"], registry=r
        )
        self.completed = Counter(
            "cyclone_steps_completed", "Steps completed by this worker.", ["queue"], registry=r
        )
        self.failed = Counter(
            "cyclone_steps_failed",
            "Failed attempts (retried or discarded).",
            ["queue", "error_kind"],
            registry=r,
        )
        self.retried = Counter(
            "cyclone_steps_retried",
            "Failed attempts scheduled for another attempt after backoff.",
            ["queue"],
            registry=r,
        )
        self.discarded = Counter(
            "cyclone_steps_discarded",
            "Steps discarded (dead letters): no attempt left, or a permanent failure.",
            ["queue", "error_kind"],
            registry=r,
        )
        self.reclaimed = Counter(
            "cyclone_steps_reclaimed",
            "Steps whose lease expired, put back to work by this client's recovery sweep.",
            ["queue"],
            registry=r,
        )
        self.database_errors = Counter(
            "cyclone_database_errors",
            "Connection-level database failures this worker rode out (restart, outage).",
            ["where"],
            registry=r,
        )
        self.handler_duration = Histogram(
            "cyclone_step_handler_duration_seconds",
            "Run time of handlers, in seconds.",
            ["queue"],
            buckets=DURATION_BUCKETS_S,
            registry=r,
        )
        self.start_latency = Histogram(
            "cyclone_step_start_latency_seconds",
            "Claim-to-start latency: seconds a step waited claimable (from scheduled_at) "
            "until a claim started its attempt.",
            ["queue"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.registry.register(
            _WithoutCreated(
                [
                    self.claimed,
                    self.completed,
                    self.failed,
                    self.retried,
                    self.discarded,
                    self.reclaimed,
                    self.database_errors,
                    self.handler_duration,
                    self.start_latency,
                ]
            )
        )

    def observe(self, event: StepEvent) -> None:
        """Count one step event (pass this method to ``Client.observe_steps``)."""
        queue = event.queue or UNKNOWN_QUEUE
        kind = event.kind
        if kind == "discarded" and event.error_kind == ITEM_FAILED:
            return  # the fan-out's roll-up of an item already counted as discarded
        if kind == "claimed":
            self.claimed.labels(queue).inc()
            if event.wait_s is not None:
                self.start_latency.labels(queue).observe(event.wait_s)
        elif kind == "completed":
            self.completed.labels(queue).inc()
        elif kind in ("retry_scheduled", "discarded"):
            error_kind = event.error_kind or "unknown"
            self.failed.labels(queue, error_kind).inc()
            if kind == "retry_scheduled":
                self.retried.labels(queue).inc()
            else:
                self.discarded.labels(queue, error_kind).inc()
        elif kind == "reclaimed":
            self.reclaimed.labels(queue).inc()
        if event.duration_s is not None:
            self.handler_duration.labels(queue).observe(event.duration_s)

    def observe_database_error(self, where: str) -> None:
        """Count one connection-level database failure at ``where`` (pass this method to
        ``Client.observe_database_errors``)."""
        self.database_errors.labels(where).inc()

    def watch_queues(
        self,
        source: QueueSource,
        queues: Iterable[str] = (),
        logger: logging.Logger | None = None,
    ) -> None:
        """Add the queue gauges, read from ``source`` (a client: its ``queue_stats()``) at
        each scrape; ``queues`` are reported even when empty (with 0)."""
        self.registry.register(
            QueueCollector(source, queues, logger or logging.getLogger("cyclone_flow"))
        )

    def watch_health(
        self,
        source: HealthSource,
        logger: logging.Logger | None = None,
        ttl_s: float = HEALTH_TTL_S,
    ) -> HealthCollector:
        """Add the health advisor's gauges (``cyclone_health_*``), read from ``source`` (a
        client: its ``health()``) at most once per ``ttl_s`` seconds."""
        collector = HealthCollector(source, logger or logging.getLogger("cyclone_flow"), ttl_s)
        self.registry.register(collector)
        return collector


class _WithoutCreated:
    """Serves ``metrics`` without their ``_created`` samples (prometheus_client's
    ``disable_created_metrics()`` would change every registry of the process)."""

    def __init__(self, metrics: list[MetricWrapperBase]) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return [family for m in self.metrics for family in m.describe()]

    def collect(self) -> Iterator[Metric]:
        for m in self.metrics:
            for family in m.collect():
                family.samples = [s for s in family.samples if not s.name.endswith("_created")]
                yield family


class QueueCollector:
    """Reads the per-queue counts (``source.queue_stats()``) at each scrape. A failed read
    is logged and leaves the gauges out of that scrape; the counters are still served."""

    def __init__(self, source: QueueSource, queues: Iterable[str], logger: logging.Logger) -> None:
        self.source = source
        self.queues = tuple(queues)
        self.log = logger

    def describe(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self.source.queue_stats()
        except Exception as exc:
            self.log.warning("metrics: could not read the queue gauges: %s", exc)
            return iter(())
        available, scheduled, running, oldest = self._families()
        seen = set()
        for s in stats:
            seen.add(s.queue)
            available.add_metric([s.queue], s.available)
            scheduled.add_metric([s.queue], s.scheduled)
            running.add_metric([s.queue], s.running)
            oldest.add_metric([s.queue], s.oldest_available_s)
        for queue in self.queues:
            if queue not in seen:
                for family in (available, scheduled, running, oldest):
                    family.add_metric([queue], 0)
        return iter((available, scheduled, running, oldest))

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(
                "cyclone_queue_available_steps",
                "Steps claimable now (queue depth).",
                labels=["queue"],
            ),
            GaugeMetricFamily(
                "cyclone_queue_scheduled_steps",
                "Available steps scheduled later (e.g. retries in backoff).",
                labels=["queue"],
            ),
            GaugeMetricFamily(
                "cyclone_queue_running_steps",
                "Steps running under a lease (any worker).",
                labels=["queue"],
            ),
            GaugeMetricFamily(
                "cyclone_queue_oldest_available_age_seconds",
                "Seconds the oldest claimable step has waited (0 when none).",
                labels=["queue"],
            ),
        )


class HealthSource(Protocol):
    """Where the health gauges are read: a :class:`cyclone_flow.Client`
    (:meth:`~cyclone_flow.Client.health`)."""

    def health(self, thresholds: Thresholds | None = None) -> HealthReport: ...


class HealthCollector:
    """The health advisor's figures as gauges (``cyclone_health_*``), from
    ``source.health()`` read at most once per ``ttl_s`` seconds (at a scrape; between two
    reads the last report is served). A failed read is logged and leaves the gauges out
    of that scrape."""

    def __init__(
        self,
        source: HealthSource,
        logger: logging.Logger,
        ttl_s: float = HEALTH_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.log = logger
        self.ttl_s = ttl_s
        self.clock = clock
        self.reads = 0  # health reports read (tests)
        self._lock = threading.Lock()
        self._report: HealthReport | None = None
        self._read_at = 0.0

    def describe(self) -> list[Metric]:
        return []  # collected only at a scrape, never at registration

    def report(self) -> HealthReport | None:
        """The cached report, read again when older than ``ttl_s`` (None: the read failed)."""
        with self._lock:
            now = self.clock()
            if self._report is None or now - self._read_at >= self.ttl_s:
                try:
                    self._report = self.source.health()
                    self.reads += 1
                except Exception as exc:
                    self.log.warning("metrics: could not read the health gauges: %s", exc)
                    self._report = None
                self._read_at = now
            return self._report

    def collect(self) -> Iterator[Metric]:
        report = self.report()
        if report is None:
            return iter(())
        return iter(health_families(report))


Samples = Callable[[HealthReport], Iterable[tuple[Sequence[str], float]]]
"""A gauge's series in a report: (label values, value) pairs."""


def _per_table(value: Callable[[TableHealth], float]) -> Samples:
    return lambda report: [([t.table_name], value(t)) for t in report.tables]


def _per_claim(value: Callable[[ClaimProbe], float]) -> Samples:
    return lambda report: [([c.queue], value(c)) for c in report.claims]


def _one(value: Callable[[HealthReport], float]) -> Samples:
    return lambda report: [((), value(report))]


def _vacuum_age(table: TableHealth) -> float:
    """Seconds since ``table`` was last vacuumed (-1: never)."""
    last = max(
        (d for d in (table.last_autovacuum, table.last_vacuum) if d is not None), default=None
    )
    return -1 if last is None else max((datetime.now(UTC) - last).total_seconds(), 0.0)


def _connections(report: HealthReport) -> list[tuple[Sequence[str], float]]:
    budget = report.connections
    return [(["in_use"], budget.in_use), (["usable"], budget.max_connections - budget.reserved)]


def _warnings(report: HealthReport) -> list[tuple[Sequence[str], float]]:
    counts: dict[str, int] = {}
    for advice in report.advice:
        counts[advice.check] = counts.get(advice.check, 0) + 1
    return [([check], counts.get(check, 0)) for check in HEALTH_CHECKS]


HEALTH_GAUGES: tuple[tuple[str, str, tuple[str, ...], Samples], ...] = (
    (
        "cyclone_health_dead_tuples",
        "Dead tuples of a hot table (statistics).",
        ("table",),
        _per_table(lambda t: t.dead),
    ),
    (
        "cyclone_health_live_tuples",
        "Live tuples of a hot table (statistics).",
        ("table",),
        _per_table(lambda t: t.live),
    ),
    (
        "cyclone_health_autovacuum_enabled",
        "1 when autovacuum may run on a hot table (server setting and table option).",
        ("table",),
        _per_table(lambda t: 1 if t.autovacuum_enabled else 0),
    ),
    (
        "cyclone_health_last_vacuum_age_seconds",
        "Seconds since a hot table was last vacuumed (auto or manual; -1: never).",
        ("table",),
        _per_table(_vacuum_age),
    ),
    (
        "cyclone_health_oldest_xmin_transaction_age_seconds",
        "Seconds the oldest transaction holding the xmin horizon back has been open (0: "
        "none older than the advisor's threshold).",
        (),
        _one(lambda r: r.oldest_transaction_s),
    ),
    (
        "cyclone_health_xmin_holders",
        "Replication slots and prepared transactions holding the xmin horizon back.",
        (),
        _one(lambda r: len(r.xmin_holders)),
    ),
    (
        "cyclone_health_claim_index_bloat_ratio",
        "The claim index's size over what its entries need (estimate).",
        (),
        _one(lambda r: r.claim_index_bloat),
    ),
    (
        "cyclone_health_claim_index_bytes",
        "Size of the claim index in bytes.",
        (),
        _one(lambda r: 0 if r.claim_index is None else r.claim_index.bytes),
    ),
    (
        "cyclone_health_claim_cost",
        "The planner's total cost of a claim.",
        ("queue",),
        _per_claim(lambda c: c.cost),
    ),
    (
        "cyclone_health_claim_buffers",
        "Buffers one claim's read touched, measured (EXPLAIN ANALYZE).",
        ("queue",),
        _per_claim(lambda c: c.buffers),
    ),
    (
        "cyclone_health_reclaimed_steps",
        "Unfinished steps reclaimed more often than the advisor's threshold.",
        (),
        _one(lambda r: len(r.reclaimed)),
    ),
    (
        "cyclone_health_held_runs",
        "Runs held by a sequence.",
        (),
        _one(lambda r: sum(s.held for s in r.sequences)),
    ),
    (
        "cyclone_health_orphaned_leases",
        "Running steps leased by clients without a live heartbeat.",
        (),
        _one(lambda r: sum(o.steps for o in r.orphaned_leases)),
    ),
    (
        "cyclone_health_schema_migrations_behind",
        "Migrations this code ships that the schema lacks (negative: the schema is newer).",
        (),
        _one(lambda r: r.code_version - r.schema_version),
    ),
    (
        "cyclone_health_connections",
        "Client connections of the server: in_use now, and the usable maximum.",
        ("kind",),
        _connections,
    ),
    (
        "cyclone_health_warnings",
        "The advisor's warnings, by check.",
        ("check",),
        _warnings,
    ),
)
"""The ``cyclone_health_*`` gauges: (name, help, label names, series of a report)."""


def health_families(report: HealthReport) -> list[Metric]:
    """The ``cyclone_health_*`` gauges of ``report`` (see the module's docstring and
    :data:`HEALTH_GAUGES`)."""
    families: list[Metric] = []
    for name, documentation, labels, samples in HEALTH_GAUGES:
        family = GaugeMetricFamily(name, documentation, labels=list(labels))
        for values, value in samples(report):
            family.add_metric(list(values), value)
        families.append(family)
    return families


HEALTH_CHECKS = tuple(check.name for check in CHECKS)
"""Every check of :class:`cyclone_flow.advisor.Advice`, the names of
:data:`cyclone_flow.advisor.CHECKS` (``cyclone_health_warnings`` has a series for each, 0
when it found nothing)."""


class MetricsServer:
    """The HTTP endpoint serving ``/metrics``; :meth:`close` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self.server = server
        self.thread = thread

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self.server.server_port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def serve_metrics(metrics: Metrics, port: int, addr: str = "0.0.0.0") -> MetricsServer:
    """Serve ``metrics`` on ``http://addr:port/metrics`` from a daemon thread. Raises
    ``OSError`` when the port cannot be bound."""
    server, thread = start_http_server(port, addr, registry=metrics.registry)
    return MetricsServer(server, thread)

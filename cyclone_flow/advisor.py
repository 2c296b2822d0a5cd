"""The health advisor: how Postgres keeps the engine's hot tables, and what to do about it
(``cyclone-flow doctor``, the worker's ``cyclone_health_*`` gauges, the dashboard's health
page; docs/observability.md).

A Postgres-backed queue rarely crashes; it rots: dead tuples pile up at the head of the
claim index while a long transaction (or a replication slot) holds the xmin horizon back,
each claim reads further through them, and the backlog grows. :func:`check` reads the
statistics and catalogs once (:mod:`cyclone_flow.db.health`, read-only, nothing locked)
and returns a :class:`HealthReport`: the figures, and one :class:`Advice` per problem,
each naming its fix. Thresholds are in :class:`Thresholds`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cyclone_flow._json import JSON
from cyclone_flow.db import health, steps
from cyclone_flow.db.conn import SessionLike
from cyclone_flow.db.rows import (
    ConnectionBudget,
    HeldSequence,
    IndexSize,
    OpenTransaction,
    OrphanedLeases,
    QueueStats,
    ReclaimedStep,
    TableHealth,
    XminHolder,
)
from cyclone_flow.durations import format_span

__all__ = ["CHECKS", "Advice", "Check", "ClaimProbe", "HealthReport", "Thresholds", "check"]

CLAIM_INDEX = "cyclone_steps_claim_idx"
INDEX_ENTRY_BYTES = 48
"""About what one entry of the claim index takes (tuple header, queue, owner, priority,
scheduled_at, id, line pointer) at the default fill factor: the bloat estimate's unit."""
PROBED_QUEUES = 10
"""Most queues whose claim :func:`check` explains (the ones with the most claimable steps)."""


@dataclass(frozen=True)
class Thresholds:
    """When the advisor warns. Ages in seconds; ``dead_ratio`` is dead / (live + dead);
    ``min_dead`` the dead tuples below which a table is never called bloated;
    ``claim_buffers`` the buffers one claim may read; ``index_bloat`` the claim index's
    size over its estimated need (from ``index_min_bytes`` on); ``reclaims`` how often a
    step may be reclaimed; ``connections`` the share of the server's connections in use;
    ``plan_min_cost`` the planner's cost (its units: 1.0 is one page read in sequence, at
    the default ``seq_page_cost``) from which a claim plan that does not walk the claim
    index is a warning: below it the planner chose a scan because the table is so small
    that reading it is cheaper than the index (about ``plan_min_cost`` pages read, within
    the ``claim_buffers`` a claim may read), which is no problem."""

    xact_age_s: float = 300.0
    dead_ratio: float = 0.5
    min_dead: int = 100_000
    claim_buffers: int = 1_000
    index_bloat: float = 4.0
    index_min_bytes: int = 8 * 1024 * 1024
    backlog_age_s: float = 300.0
    reclaims: int = 3
    sequence_age_s: float = 3600.0
    connections: float = 0.9
    plan_min_cost: float = 1_000.0


@dataclass(frozen=True)
class Advice:
    """One warning: the ``check`` that found it (the name of one of :data:`CHECKS`), what
    it is about (``subject``: a table, a pid, a queue...), the ``message`` and the
    ``fix``."""

    check: str
    subject: str
    message: str
    fix: str

    def text(self) -> str:
        """``message`` then ``fix``, on one line."""
        return f"{self.message}. Fix: {self.fix}"


@dataclass(frozen=True)
class ClaimProbe:
    """The engine's claim on one queue, on the real table: the planner's total ``cost``
    and whether its plan walks the claim index (``uses_claim_index``), and the claim's
    read measured by EXPLAIN ANALYZE: ``rows`` found, ``buffers`` read (shared hit +
    read) and ``time_ms``."""

    queue: str
    cost: float
    uses_claim_index: bool
    rows: int
    buffers: int
    time_ms: float

    def scan_is_cheaper(self, thresholds: Thresholds) -> bool:
        """Whether the plan does not walk the claim index because the table is small: the
        planner's cost stays under ``thresholds.plan_min_cost`` (no warning)."""
        return not self.uses_claim_index and self.cost < thresholds.plan_min_cost

    def index_text(self, thresholds: Thresholds) -> str:
        """Whether the claim walks the claim index, for a display: ``yes``, ``no: a scan
        is cheaper on a table this small (cost 12 < 1000)`` (not a problem), or ``NO (cost
        N)`` (a warning: :func:`advise` names the fix)."""
        if self.uses_claim_index:
            return "yes"
        if self.scan_is_cheaper(thresholds):
            limit = f"{thresholds.plan_min_cost:.0f}"
            return f"no: a scan is cheaper on a table this small (cost {self.cost:.0f} < {limit})"
        return f"NO (cost {self.cost:.0f})"


@dataclass(frozen=True)
class HealthReport:
    """What :func:`check` found: the figures and the ``advice`` (empty: healthy)."""

    schema: str
    tables: list[TableHealth]
    transactions: list[OpenTransaction]
    xmin_holders: list[XminHolder]
    claim_index: IndexSize | None
    claim_index_bloat: float
    claims: list[ClaimProbe]
    queues: list[QueueStats]
    reclaimed: list[ReclaimedStep]
    sequences: list[HeldSequence]
    orphaned_leases: list[OrphanedLeases]
    schema_version: int
    code_version: int
    connections: ConnectionBudget
    pool_reserve: int
    thresholds: Thresholds = field(default_factory=Thresholds)
    advice: list[Advice] = field(default_factory=list)
    oldest_xmin_holder: OpenTransaction | None = None
    """The oldest transaction holding the xmin horizon, however young (``transactions``
    lists only those past ``thresholds.xact_age_s``, which are warned about)."""

    @property
    def pool_budget(self) -> int:
        """The connections the live workers' pools may open: each its worker threads (the
        default ``tx_slots``) plus ``pool_reserve`` (Engine Design: Pool Budget), an upper
        bound when workers run with fewer ``tx_slots``."""
        return self.connections.worker_threads + self.pool_reserve * self.connections.live_workers

    @property
    def healthy(self) -> bool:
        """True when there is no advice."""
        return not self.advice

    @property
    def oldest_transaction_s(self) -> float:
        """Seconds the oldest transaction that holds the xmin horizon has been open (0:
        none)."""
        return max((t.age_s for t in self.transactions if t.holds_xmin), default=0.0)

    def to_json(self) -> dict[str, JSON]:
        """The report as JSON values (timestamps in ISO 8601), for ``doctor --json``."""
        return {
            "healthy": self.healthy,
            "schema": self.schema,
            "advice": [_plain(a) for a in self.advice],
            "tables": [_plain(t) for t in self.tables],
            "transactions": [_plain(t) for t in self.transactions],
            "xmin_holders": [_plain(x) for x in self.xmin_holders],
            "oldest_xmin_holder": (
                None if self.oldest_xmin_holder is None else _plain(self.oldest_xmin_holder)
            ),
            "claim_index": None if self.claim_index is None else _plain(self.claim_index),
            "claim_index_bloat": round(self.claim_index_bloat, 2),
            "claims": [_plain(c) for c in self.claims],
            "queues": [_plain(q) for q in self.queues],
            "reclaimed": [_plain(r) for r in self.reclaimed],
            "sequences": [_plain(s) for s in self.sequences],
            "orphaned_leases": [_plain(o) for o in self.orphaned_leases],
            "schema_version": self.schema_version,
            "code_version": self.code_version,
            "connections": _plain(self.connections),
            "pool_budget": self.pool_budget,
            "thresholds": _plain(self.thresholds),
        }


def _plain(row: Any) -> dict[str, JSON]:
    out: dict[str, JSON] = {}
    for key, value in dataclasses.asdict(row).items():
        out[key] = value.isoformat() if isinstance(value, datetime) else value
    return out


def check(
    s: SessionLike,
    *,
    schema: str,
    schema_version: int,
    code_version: int,
    pool_reserve: int,
    thresholds: Thresholds | None = None,
    owner: str = "cyclone-flow-doctor",
) -> HealthReport:
    """Read the health of ``schema`` on ``s`` (an autocommit session is best: the reads
    then hold no snapshot between them) and advise. ``schema_version`` is the schema's
    applied migration and ``code_version`` this code's latest; ``pool_reserve`` the
    connections a pool holds beyond its ``tx_slots`` (``config.POOL_RESERVE``); ``owner`` the lease
    owner named in the explained claim (nothing is claimed)."""
    t = thresholds or Thresholds()
    if schema_version == 0:  # no cyclone tables in this schema: nothing else to read
        empty = HealthReport(
            schema=schema,
            tables=[],
            transactions=[],
            xmin_holders=[],
            claim_index=None,
            claim_index_bloat=1.0,
            claims=[],
            queues=[],
            reclaimed=[],
            sequences=[],
            orphaned_leases=[],
            schema_version=0,
            code_version=code_version,
            connections=ConnectionBudget(0, 0, 0, 0, 0),
            pool_reserve=pool_reserve,
            thresholds=t,
        )
        empty.advice.extend(advise(empty))
        return empty
    tables = health.health_list_tables(s, schema=schema)
    transactions = health.health_list_open_transactions(s, min_age_s=t.xact_age_s, limit=20)
    holders = health.health_list_xmin_slots(s)
    oldest = health.health_get_oldest_xmin_holder(s)
    index = health.health_get_claim_index(s, schema=schema)
    queues = steps.step_count_by_queue(s)
    probed = sorted(queues, key=lambda q: -q.available)[:PROBED_QUEUES]
    claims = [_probe(s, q.queue, owner) for q in probed or [QueueStats("default", 0, 0, 0, 0.0)]]
    reclaimed = steps.step_list_reclaimed(s, min_reclaims=t.reclaims, limit=20)
    sequences = health.health_list_held_sequences(s, limit=20)
    orphaned = health.health_list_orphaned_leases(s, limit=20)
    connections = health.health_get_connections(s)
    report = HealthReport(
        schema=schema,
        tables=tables,
        transactions=transactions,
        xmin_holders=holders,
        claim_index=index,
        claim_index_bloat=_bloat(index),
        claims=claims,
        queues=queues,
        reclaimed=reclaimed,
        sequences=sequences,
        orphaned_leases=orphaned,
        schema_version=schema_version,
        code_version=code_version,
        connections=connections,
        pool_reserve=pool_reserve,
        thresholds=t,
        oldest_xmin_holder=oldest,
    )
    report.advice.extend(advise(report))
    return report


def _bloat(index: IndexSize | None) -> float:
    """The claim index's size over what its counted entries need (1.0: none extra)."""
    if index is None:
        return 1.0
    need = max(index.entries, 0.0) * INDEX_ENTRY_BYTES + 2 * 8192  # + metapage and root
    return max(index.bytes / need, 1.0)


def _probe(s: SessionLike, queue: str, owner: str) -> ClaimProbe:
    planned = health.explain_claim(s, queue=queue, owner=owner, ttl_s=30.0, limit=10)
    measured = health.health_explain_claim_read(s, queue=queue, limit=10)
    plan = _top(planned)
    run = _top(measured)
    return ClaimProbe(
        queue=queue,
        cost=float(plan.get("Total Cost", 0.0)),
        uses_claim_index=CLAIM_INDEX in repr(plan),
        rows=int(run.get("Actual Rows", 0)),
        buffers=int(run.get("Shared Hit Blocks", 0)) + int(run.get("Shared Read Blocks", 0)),
        time_ms=float(_first(measured).get("Execution Time", 0.0)),
    )


def _first(explained: JSON) -> dict[str, Any]:
    if isinstance(explained, list) and explained and isinstance(explained[0], dict):
        return explained[0]
    return {}


def _top(explained: JSON) -> dict[str, Any]:
    plan = _first(explained).get("Plan")
    return plan if isinstance(plan, dict) else {}


# -- advice: one function per check; CHECKS names each once, in order -----------------------

Elapsed = Callable[[float], str]
"""Seconds to text, for the ages in the messages."""

Finding = tuple[str, str, str]
"""What a check found: ``(subject, message, fix)``; :meth:`Check.advise` makes it an
:class:`Advice` under the check's name."""


def advise(report: HealthReport, elapsed: Elapsed = format_span) -> list[Advice]:
    """Every warning of ``report``, each naming its fix (the thresholds of the report),
    check after check in the order of :data:`CHECKS`; ``elapsed`` writes the ages in the
    messages (seconds to text: the dashboard passes its own format)."""
    return [advice for check in CHECKS for advice in check.advise(report, elapsed)]


def _xmin_holding(report: HealthReport) -> list[OpenTransaction]:
    """The open transactions (past the age threshold) that hold the xmin horizon back."""
    return [x for x in report.transactions if x.holds_xmin]


def _open_transaction(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    for x in report.transactions:
        who = x.application_name or "(no application_name)"
        state = x.state or "active"
        if x.holds_xmin:
            effect = "it prevents vacuum of cyclone_steps and cyclone_runs (dead rows pile up)"
        else:
            effect = "it holds its locks (no snapshot: it does not hold back vacuum yet)"
        yield (
            f"pid {x.pid}",
            f"a transaction from application {who} (pid {x.pid}, user {x.usename}, "
            f"{state}) has been open {elapsed(x.age_s)}; {effect}",
            f"end it (SELECT pg_terminate_backend({x.pid})) and find why the application "
            "keeps it open; set idle_in_transaction_session_timeout (and "
            "transaction_timeout on Postgres 17+) for that role",
        )


def _xmin_holder(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    for h in report.xmin_holders:
        if h.kind == "slot":
            yield (
                f"slot {h.name}",
                f"replication slot {h.name} ({'active' if h.active else 'inactive'}) holds "
                f"the xmin horizon {h.xmin_age} transactions back; vacuum of every table "
                "waits for it",
                f"drop it if nothing uses it (SELECT pg_drop_replication_slot('{h.name}')), "
                "else fix the standby it feeds (hot_standby_feedback, its replay lag)",
            )
        elif h.age_s is not None and h.age_s >= report.thresholds.xact_age_s:
            yield (
                f"prepared {h.name}",
                f"prepared transaction {h.name!r} has waited {elapsed(h.age_s)}; it holds the "
                "xmin horizon back",
                f"COMMIT PREPARED '{h.name}' or ROLLBACK PREPARED '{h.name}'",
            )


def _autovacuum(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    for table in report.tables:
        if not table.autovacuum_enabled:
            name = f"{report.schema}.{table.table_name}"
            yield (
                table.table_name,
                f"autovacuum is off for {name} ({table.options or 'server autovacuum = off'})",
                f"ALTER TABLE {name} RESET (autovacuum_enabled); and keep the server's "
                "autovacuum = on",
            )


def _dead_tuples(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    t = report.thresholds
    holders = _xmin_holding(report)
    for table in report.tables:
        rows = table.live + table.dead
        if table.dead >= t.min_dead and rows and table.dead / rows >= t.dead_ratio:
            name = f"{report.schema}.{table.table_name}"
            last = table.last_autovacuum or table.last_vacuum
            when = "never" if last is None else last.isoformat(timespec="seconds")
            cause = (
                f"end the transaction holding the xmin horizon first (pid {holders[0].pid}), "
                if holders
                else ""
            )
            yield (
                table.table_name,
                f"{name} has {table.dead} dead tuples ({100 * table.dead / rows:.0f}% of its "
                f"rows); last vacuum: {when}",
                f"{cause}VACUUM (VERBOSE) {name}; let autovacuum keep up: ALTER TABLE {name} "
                "SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = "
                "0) (docs/deployment.md)",
            )


def _claim_index(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    t = report.thresholds
    index = report.claim_index
    if (
        index is not None
        and index.bytes >= t.index_min_bytes
        and report.claim_index_bloat >= t.index_bloat
    ):
        yield (
            CLAIM_INDEX,
            f"{CLAIM_INDEX} is {index.bytes // (1024 * 1024)} MiB, about "
            f"{report.claim_index_bloat:.0f}x what its {max(index.entries, 0):.0f} entries "
            "need",
            f"REINDEX INDEX CONCURRENTLY {report.schema}.{CLAIM_INDEX}",
        )
    elif index is None and report.schema_version:
        yield (
            CLAIM_INDEX,
            f"{CLAIM_INDEX} is missing from schema {report.schema}",
            "run cyclone-flow migrate (migration 0009 builds it)",
        )


def _claim_plan(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    t, q = report.thresholds, report.schema
    if report.claim_index is None:
        return  # the claim_index check tells it is missing
    for c in report.claims:
        if not c.uses_claim_index and not c.scan_is_cheaper(t):
            yield (
                f"queue {c.queue}",
                f"the claim of queue {c.queue} does not walk {CLAIM_INDEX} (cost "
                f"{c.cost:.0f}, over the {t.plan_min_cost:.0f} below which a scan of a small "
                "table is the better plan)",
                f"ANALYZE {q}.cyclone_steps; if it stays so, REINDEX INDEX {q}.{CLAIM_INDEX}",
            )


def _claim_cost(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    holders = _xmin_holding(report)
    for c in report.claims:
        if c.buffers > report.thresholds.claim_buffers:
            yield (
                f"queue {c.queue}",
                f"a claim of queue {c.queue} reads {c.buffers} buffers ({c.time_ms:.1f} ms) to "
                f"find {c.rows} steps: dead index entries at the head of the queue",
                (f"end pid {holders[0].pid}'s transaction, then " if holders else "")
                + f"VACUUM {report.schema}.cyclone_steps",
            )


def _backlog(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    for stats in report.queues:
        if stats.available and stats.oldest_available_s >= report.thresholds.backlog_age_s:
            yield (
                f"queue {stats.queue}",
                f"queue {stats.queue}: the oldest of its {stats.available} claimable steps "
                f"has waited {elapsed(stats.oldest_available_s)}",
                f"start more workers for it (cyclone-flow worker --queue {stats.queue}) or "
                "check the running ones (cyclone-flow workers)",
            )


def _reclaims(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    if report.reclaimed:
        worst = report.reclaimed[0]
        yield (
            f"run {worst.run_id}",
            f"{len(report.reclaimed)} unfinished step(s) were reclaimed more than "
            f"{report.thresholds.reclaims} times (worst: node {worst.node} of run "
            f"{worst.run_id}, {worst.reclaims} times)",
            "their workers keep dying or losing their leases: read the workers' logs (OOM "
            "kills, restarts), raise lease_ttl for handlers that block, or cancel the run",
        )


def _sequence(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    for seq in report.sequences:
        if seq.head_state == "failed":
            yield (
                f"sequence {seq.sequence_key}",
                f"sequence {seq.sequence_key} is blocked: {seq.held} run(s) wait behind "
                f"failed run {seq.head_run_id}",
                f"cyclone-flow retry {seq.head_run_id} (or cyclone-flow cancel "
                f"{seq.head_run_id} to let the next run go)",
            )
        elif seq.oldest_held_s >= report.thresholds.sequence_age_s:
            yield (
                f"sequence {seq.sequence_key}",
                f"sequence {seq.sequence_key}: {seq.held} run(s) held, the oldest for "
                f"{elapsed(seq.oldest_held_s)}, behind run {seq.head_run_id} "
                f"({seq.head_state or 'none open'})",
                f"look at run {seq.head_run_id} (cyclone-flow status {seq.head_run_id})",
            )


def _orphaned_leases(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    for o in report.orphaned_leases:
        seen = "no heartbeat row" if o.heartbeat_at is None else "no heartbeat since "
        seen += "" if o.heartbeat_at is None else o.heartbeat_at.isoformat(timespec="seconds")
        expiry = "" if o.lease_expiry is None else o.lease_expiry.isoformat(timespec="seconds")
        yield (
            f"client {o.lease_owner}",
            f"{o.steps} running step(s) are leased by client {o.lease_owner}, which has {seen}",
            f"a live worker's recovery sweep reclaims them once their leases expire "
            f"({expiry}); make sure a worker runs (cyclone-flow workers)",
        )


def _schema_version(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    q, have, ship = report.schema, report.schema_version, report.code_version
    if have < ship:
        yield (
            q,
            f"schema {q} is at migration {have}, this code ships {ship}",
            "cyclone-flow migrate",
        )
    elif have > ship:
        yield (
            q,
            f"schema {q} is at migration {have}, newer than this code's {ship}",
            "upgrade cyclone-flow where this runs",
        )


def _connections(report: HealthReport, elapsed: Elapsed) -> Iterator[Finding]:
    conn = report.connections
    usable = max(conn.max_connections - conn.reserved, 1)
    if conn.max_connections and conn.in_use >= report.thresholds.connections * usable:
        yield (
            "max_connections",
            f"{conn.in_use} of the {usable} client connections the server allows are open",
            "put PgBouncer (transaction mode) in front (docs/deployment.md) or raise "
            "max_connections",
        )
    budget = report.pool_budget
    if budget > usable:
        yield (
            "pool budget",
            f"{conn.live_workers} live workers may open {budget} connections "
            f"({conn.worker_threads} worker threads + {report.pool_reserve} each), more "
            f"than the {usable} the server allows",
            "lower tx_slots or the worker processes, raise max_connections, or put "
            "PgBouncer in front (docs/deployment.md)",
        )


@dataclass(frozen=True)
class Check:
    """One check of the advisor: its ``name``, written only here (every :class:`Advice` it
    gives carries it; ``cyclone_health_warnings`` counts them by it) and ``findings``, its
    ``(subject, message, fix)`` over a report (``elapsed`` writes the ages)."""

    name: str
    findings: Callable[[HealthReport, Elapsed], Iterable[Finding]]

    def advise(self, report: HealthReport, elapsed: Elapsed = format_span) -> Iterator[Advice]:
        """The check's warnings over ``report``, each an :class:`Advice` named after it."""
        for subject, message, fix in self.findings(report, elapsed):
            yield Advice(self.name, subject, message, fix)


CHECKS: tuple[Check, ...] = (
    Check("open_transaction", _open_transaction),
    Check("xmin_holder", _xmin_holder),
    Check("autovacuum", _autovacuum),
    Check("dead_tuples", _dead_tuples),
    Check("claim_index", _claim_index),
    Check("claim_plan", _claim_plan),
    Check("claim_cost", _claim_cost),
    Check("backlog", _backlog),
    Check("reclaims", _reclaims),
    Check("sequence", _sequence),
    Check("orphaned_leases", _orphaned_leases),
    Check("schema_version", _schema_version),
    Check("connections", _connections),
)
"""Every check, in the order :func:`advise` runs them (the order of its advice)."""

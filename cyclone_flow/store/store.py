"""The only module that runs SQL: typed store methods over the named statements.

Every state change is a guarded compare-and-swap (``UPDATE ... WHERE state = ... AND
lease_generation = ... RETURNING``); zero rows changed is a result (``None``/``False``:
"stale"), never an exception (Engine Design: CAS State Transitions). Methods that take a
``conn`` run inside the caller's transaction and never commit; the others take a
connection from the pool and commit before they return. Time always comes from the
database's ``now()``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from cyclone_flow.errors import RunNotFoundError, RunStateError
from cyclone_flow.spec.model import JSON, Flow
from cyclone_flow.states import ErrorKind, RunState, StepState
from cyclone_flow.store import queries
from cyclone_flow.store.queue_store import QueueStoreMixin

Conn = psycopg.Connection[Any]

CHANNEL_AVAILABLE = "cyclone_available"
CHANNEL_RUN_DONE = "cyclone_run_done"


def dumps(value: JSON) -> str:
    """Encode a JSON value the way the engine stores it (compact, UTF-8 kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def contains_nul(value: JSON) -> bool:
    """True when a string (or key) inside ``value`` holds U+0000, which jsonb cannot store."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(contains_nul(k) or contains_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(contains_nul(v) for v in value)
    return False


def printable(text: str | None) -> str | None:
    """``text`` with NUL characters spelled out (Postgres text cannot hold them)."""
    return None if text is None else text.replace("\x00", "\\x00")


@dataclass
class Wakeups:
    """Wakeup hints collected by transitions; published only after the commit succeeds
    (Engine Design: LISTEN/NOTIFY and the Polling Floor)."""

    queues: set[str] = field(default_factory=set)
    runs_done: set[str] = field(default_factory=set)

    def merge(self, other: Wakeups) -> None:
        self.queues |= other.queues
        self.runs_done |= other.runs_done

    def __bool__(self) -> bool:
        return bool(self.queues or self.runs_done)


@dataclass(frozen=True)
class ClaimedStep:
    """A step this client claimed: the lease is identified by ``(id, lease_generation)``.

    ``input`` is the node's unresolved input template; ``timeout_s`` is seconds or None;
    ``wait_s`` the seconds it waited claimable (from ``scheduled_at``) before this claim.
    """

    id: int
    run_id: str
    node: str
    type: str
    call: str | None
    queue: str
    attempt: int
    max_attempts: int
    reclaims: int
    lease_generation: int
    input: JSON
    timeout_s: float | None
    wait_s: float = 0.0


@dataclass(frozen=True)
class Outcome:
    """What a committed transition did to the run: the step's new state, the run's new
    state when it became terminal in the same transaction, and the wakeups to publish
    (``queue``: the step's queue, when the transition reports it)."""

    step_state: StepState
    run_state: RunState | None
    wakeups: Wakeups
    cancelled: tuple[str, ...] = ()
    queue: str | None = None


@dataclass(frozen=True)
class RunStatus:
    """One row of ``cyclone_runs`` (timestamps from the database, UTC)."""

    id: str
    flow_name: str
    state: RunState
    input: JSON
    output: JSON
    error: str | None
    error_kind: str | None
    created_at: datetime
    finished_at: datetime | None
    digest: str


@dataclass(frozen=True)
class StepStatus:
    """One row of ``cyclone_steps`` as reported by ``status`` and ``list_steps``."""

    id: int
    node: str
    type: str
    call: str | None
    state: StepState
    queue: str
    priority: int
    attempt: int
    max_attempts: int
    reclaims: int
    lease_owner: str | None
    lease_expiry: datetime | None
    lease_generation: int
    started_at: datetime | None
    finished_at: datetime | None
    scheduled_at: datetime
    output: JSON
    error: str | None
    error_kind: str | None
    errors: list[dict[str, Any]]


@dataclass(frozen=True)
class QueueStats:
    """One queue's steps now: ``available`` (claimable: the depth), ``scheduled``
    (available at a later ``scheduled_at``, e.g. a retry in backoff), ``running``, and
    ``oldest_available_s``, seconds the oldest claimable step has waited (0 when none)."""

    queue: str
    available: int
    scheduled: int
    running: int
    oldest_available_s: float


def parse_run_id(run_id: str | uuid.UUID) -> str:
    """Normalise a run id; raise :class:`RunNotFoundError` for text that is not a UUID."""
    try:
        return str(uuid.UUID(str(run_id)))
    except ValueError:
        raise RunNotFoundError(str(run_id)) from None


class Store(QueueStoreMixin):
    """Typed access to the engine's tables in one Postgres schema.

    ``pool`` provides connections; ``schema`` must be a validated identifier.
    """

    def __init__(self, pool: ConnectionPool[Any], schema: str) -> None:
        self.pool = pool
        self.schema = schema
        self.q = queries.render(schema)

    # -- submit --------------------------------------------------------------------------

    def insert_run(self, conn: Conn, flow: Flow, input_json: str) -> str:
        """Write the definition (once per digest), the run, its steps and ``cyclone_deps``
        inside the caller's transaction; return the run id. Roots start ``available``.
        ``input_json`` is the run input, already validated and encoded."""
        workflow_id = self.store_definition(conn, flow)
        got = conn.execute(
            self.q["run_insert"],
            {"workflow_id": workflow_id, "flow_name": flow.name, "input": input_json},
        ).fetchone()
        assert got is not None
        run_id = str(got[0])
        self.insert_steps(conn, run_id, flow)
        return run_id

    def store_definition(self, conn: Conn, flow: Flow) -> int:
        """Store the flow's definition once per ``(name, digest)``; return its id."""
        row = None
        for _ in range(2):  # a concurrent first insert of the same digest: read it back
            row = conn.execute(
                self.q["workflow_upsert"],
                {"name": flow.name, "digest": flow.digest, "definition": dumps(flow.document)},
            ).fetchone()
            if row:
                break
        if row is None:
            raise RuntimeError(f"could not store the definition of flow {flow.name!r}")
        return int(row[0])

    def insert_steps(
        self, conn: Conn, run_id: str, flow: Flow, *, hold_roots: bool = False
    ) -> None:
        """Insert one step per node and the graph of a new run: roots ``available`` (or
        ``pending`` with ``hold_roots``: a held run of a sequence), the others ``pending``."""
        root_state = StepState.PENDING if hold_roots else StepState.AVAILABLE
        nodes = list(flow.nodes.values())
        conn.execute(
            self.q["step_insert_many"],
            {
                "run_id": run_id,
                "nodes": [n.name for n in nodes],
                "types": [n.type for n in nodes],
                "calls": [n.call for n in nodes],
                "states": [StepState.PENDING if n.needs else root_state for n in nodes],
                "queues": [n.queue for n in nodes],
                "priorities": [n.priority for n in nodes],
                "max_attempts": [n.retry.max_attempts for n in nodes],
                "backoffs": [
                    dumps(
                        {
                            "initial_s": n.retry.backoff.initial_s,
                            "max_s": n.retry.backoff.max_s,
                            "multiplier": n.retry.backoff.multiplier,
                            "jitter": n.retry.backoff.jitter,
                        }
                    )
                    for n in nodes
                ],
                "on_dep_failures": [n.on_dep_failure for n in nodes],
                "timeouts_s": [n.timeout_s for n in nodes],
                "inputs": [None if n.input is None else dumps(n.input) for n in nodes],
            },
        )
        edges = [(n.name, d) for n in nodes for d in n.needs]
        if edges:
            conn.execute(
                self.q["dep_insert_many"],
                {
                    "run_id": run_id,
                    "nodes": [e[0] for e in edges],
                    "depends_on": [e[1] for e in edges],
                },
            )

    # -- claim and lease -----------------------------------------------------------------

    def claim(
        self,
        owner: str,
        ttl_s: float,
        queues: Sequence[str],
        limit: int,
        run_id: str | None = None,
    ) -> list[ClaimedStep]:
        """Claim up to ``limit`` available steps of ``queues`` (of run ``run_id`` only, when
        given) (Engine Design: The Claiming Algorithm); ``ttl_s`` is the lease TTL in
        seconds. One statement in autocommit: one round trip, no BEGIN/COMMIT around it
        (the claim is as atomic; the enqueue-to-claim latency is shorter)."""
        with self.pool.connection() as conn, _autocommit(conn):
            rows = conn.execute(
                self.q["step_claim"],
                {
                    "queues": list(queues),
                    "limit": limit,
                    "owner": owner,
                    "ttl_us": int(ttl_s * 1_000_000),
                    "run_id": run_id,
                },
            ).fetchall()
        return [
            ClaimedStep(
                id=r[0],
                run_id=str(r[1]),
                node=r[2],
                type=r[3],
                call=r[4],
                queue=r[5],
                attempt=r[6],
                max_attempts=r[7],
                reclaims=r[8],
                lease_generation=r[9],
                input=r[10],
                timeout_s=r[11],
                wait_s=r[12],
            )
            for r in rows
        ]

    def heartbeat(
        self, owner: str, ttl_s: float, leases: Sequence[tuple[int, int]]
    ) -> set[tuple[int, int]]:
        """Renew every lease in ``leases`` (``(step_id, lease_generation)`` pairs) in one
        statement; return the pairs renewed. A lease not renewed is lost (cancelled, timed
        out, or reclaimed): its handler should stop (Engine Design: Leases and Heartbeats).
        """
        if not leases:
            return set()
        with self.pool.connection() as conn:
            rows = conn.execute(
                self.q["step_heartbeat_many"],
                {
                    "ids": [lease[0] for lease in leases],
                    "generations": [lease[1] for lease in leases],
                    "owner": owner,
                    "ttl_us": int(ttl_s * 1_000_000),
                },
            ).fetchall()
        return {(r[0], r[1]) for r in rows}

    def release_leases(self, owner: str, leases: Sequence[tuple[int, int]]) -> Wakeups:
        """Give back unfinished steps at shutdown so another worker claims them at once."""
        wakeups = Wakeups()
        if not leases:
            return wakeups
        with self.pool.connection() as conn:
            rows = conn.execute(
                self.q["step_release_leases"],
                {
                    "ids": [lease[0] for lease in leases],
                    "generations": [lease[1] for lease in leases],
                    "owner": owner,
                },
            ).fetchall()
        wakeups.queues.update(r[0] for r in rows)
        return wakeups

    # -- completion and failure (run under the run row lock) ----------------------------

    def lock_run(self, conn: Conn, run_id: str) -> RunState | None:
        """Take the run row lock for the rest of the caller's transaction; return the
        run's state (None when the run no longer exists)."""
        row = conn.execute(self.q["run_lock"], {"run_id": run_id}).fetchone()
        return RunState(row[0]) if row else None

    def complete_step(
        self, conn: Conn, step: ClaimedStep, owner: str, output_json: str
    ) -> Outcome | None:
        """running -> completed and advance the run, in the caller's transaction: release
        dependents whose deps all completed, complete the run when nothing is left.
        Returns None when stale (the caller must roll back, business writes included)."""
        self.lock_run(conn, step.run_id)
        row = conn.execute(
            self.q["step_complete_if_leased"],
            {
                "id": step.id,
                "owner": owner,
                "generation": step.lease_generation,
                "output": output_json,
            },
        ).fetchone()
        if row is None:
            return None
        wakeups = Wakeups()
        released = conn.execute(
            self.q["step_release_ready"], {"run_id": step.run_id, "node": step.node}
        ).fetchall()
        wakeups.queues.update(r[0] for r in released)
        run_state = None
        if not released:
            run_state = self._complete_run_if_done(conn, step.run_id, wakeups)
        return Outcome(StepState.COMPLETED, run_state, wakeups)

    def fail_step(
        self,
        conn: Conn,
        *,
        step_id: int,
        run_id: str,
        generation: int,
        owner: str | None,
        error: str,
        error_kind: ErrorKind,
        traceback: str | None = None,
        permanent: bool = False,
        timed_out: bool = False,
    ) -> Outcome | None:
        """A failed attempt, in the caller's transaction under the run row lock: retry
        after backoff while attempts remain (and not ``permanent``), else discard and
        resolve the run (Engine Design: Failure Propagation). ``owner`` None lets the
        recovery sweep fail a step it does not own; the generation still guards it.
        ``timed_out``: only when ``started_at + timeout`` has passed (a timeout failure).
        Returns None when stale."""
        error = printable(error) or ""
        traceback = printable(traceback)
        self.lock_run(conn, run_id)
        row = conn.execute(
            self.q["step_fail_attempt"],
            {
                "id": step_id,
                "generation": generation,
                "owner": owner,
                "error": error,
                "error_kind": str(error_kind),
                "traceback": traceback,
                "permanent": permanent,
                "timed_out": timed_out,
            },
        ).fetchone()
        if row is None:
            return None
        node, state, queue = row[1], StepState(row[2]), row[3]
        wakeups = Wakeups()
        if state is StepState.AVAILABLE:
            wakeups.queues.add(queue)
            return Outcome(state, None, wakeups, queue=queue)
        run_state, cancelled = self._resolve_discard(conn, run_id, node, error, wakeups)
        return Outcome(state, run_state, wakeups, cancelled, queue=queue)

    def _resolve_discard(
        self, conn: Conn, run_id: str, node: str, error: str, wakeups: Wakeups
    ) -> tuple[RunState | None, tuple[str, ...]]:
        """Apply the dependents' ``on_dep_failure``: fatal (a ``fail_run`` dependent, or a
        leaf) fails the run and cancels its other steps; else only the branch is cancelled
        (Engine Design: Failure Propagation)."""
        downstream = conn.execute(
            self.q["dep_downstream"], {"run_id": run_id, "node": node}
        ).fetchall()
        fatal = not downstream or any(r[1] == "fail_run" for r in downstream)
        if fatal:
            failed = conn.execute(
                self.q["run_fail_if_running"],
                {
                    "run_id": run_id,
                    "error": f"step {node} discarded: {error}",
                    "error_kind": "step_discarded",
                },
            ).fetchone()
            if failed is None:
                return None, ()  # already terminal: a run fails fast only once
            rows = conn.execute(
                self.q["step_cancel_remaining"],
                {"run_id": run_id, "error": f"run failed: step {node} was discarded"},
            ).fetchall()
            wakeups.runs_done.add(run_id)
            return RunState.FAILED, tuple(r[0] for r in rows)
        rows = conn.execute(
            self.q["step_cancel_nodes"],
            {
                "run_id": run_id,
                "nodes": [r[0] for r in downstream],
                "error": f"branch cancelled: upstream step {node} was discarded",
            },
        ).fetchall()
        cancelled = tuple(r[0] for r in rows)
        return self._complete_run_if_done(conn, run_id, wakeups), cancelled

    # -- operator actions ----------------------------------------------------------------

    def cancel_run(
        self, run_id: str, reason: str, wakeups: Wakeups
    ) -> tuple[bool, tuple[str, ...]]:
        """running -> cancelled and every non-terminal step -> cancelled, under the run
        lock; returns ``(False, ())`` when the run was already terminal (a racing
        completion won), else ``(True, cancelled nodes)``. A failed run of a sequence can
        be cancelled too, which lets the runs held behind it go on (the release is in the
        same transaction; its wakeups are added to ``wakeups``, for the caller to publish
        after the commit). Raises RunNotFoundError."""
        with self.pool.connection() as conn, conn.transaction():
            state = self.lock_run(conn, run_id)
            if state is None:
                raise RunNotFoundError(run_id)
            done = conn.execute(
                self.q["run_cancel_if_running"], {"run_id": run_id, "error": reason}
            ).fetchone()
            if done is None and not self.cancel_failed_in_sequence(conn, run_id, reason):
                return False, ()
            rows = conn.execute(
                self.q["step_cancel_remaining"], {"run_id": run_id, "error": reason}
            ).fetchall()
            self.release_sequence_after(conn, run_id, wakeups)
        return True, tuple(r[0] for r in rows)

    def retry_run(self, run_id: str, node: str | None = None) -> tuple[list[str], Wakeups]:
        """Operator retry of a failed or cancelled run (or a completed one whose
        cancel_branch policy left a discarded step): its discarded steps (all, or only
        ``node``) and every cancelled step go back to pending/available with attempts and
        reclaims reset, and the run back to running. Returns the reset nodes and the
        wakeups to publish. Raises RunNotFoundError, RunStateError."""
        with self.pool.connection() as conn, conn.transaction():
            state = self.lock_run(conn, run_id)
            if state is None:
                raise RunNotFoundError(run_id)
            if state is RunState.RUNNING or (
                state is RunState.COMPLETED
                and not conn.execute(self.q["step_list_discarded"], {"run_id": run_id}).fetchone()
            ):
                raise RunStateError(
                    run_id,
                    state,
                    "only failed or cancelled runs, or completed runs with a discarded step "
                    "(on_dep_failure: cancel_branch), can be retried",
                )
            if state is not RunState.FAILED and self.run_sequence_key(conn, run_id) is not None:
                raise RunStateError(
                    run_id,
                    state,
                    "it is in a sequence and the runs behind it have been released; submit "
                    "a new run instead (only a failed run of a sequence can be retried)",
                )
            if node is not None:
                row = conn.execute(
                    self.q["step_get_state"], {"run_id": run_id, "node": node}
                ).fetchone()
                if row is None:
                    raise RunStateError(run_id, state, f"it has no node {node!r}")
                if row[0] not in (StepState.DISCARDED, StepState.CANCELLED):
                    raise RunStateError(
                        run_id, state, f"node {node!r} is {row[0]}, not discarded or cancelled"
                    )
            conn.execute(self.q["run_reopen"], {"run_id": run_id})
            reset = conn.execute(
                self.q["step_reset_for_retry"], {"run_id": run_id, "node": node}
            ).fetchall()
            # A step left discarded must not sit upstream of a reset one: that step could
            # never run and the run would never end. Refuse (the transaction rolls back).
            reset_nodes = {r[0] for r in reset}
            for (blocker,) in conn.execute(
                self.q["step_list_discarded"], {"run_id": run_id}
            ).fetchall():
                below = conn.execute(
                    self.q["dep_downstream"], {"run_id": run_id, "node": blocker}
                ).fetchall()
                if reset_nodes & {r[0] for r in below}:
                    raise RunStateError(
                        run_id,
                        state,
                        f"node {node!r} is downstream of the discarded node {blocker!r}: "
                        f"retry {blocker!r} or the whole run",
                    )
            ready = conn.execute(
                self.q["step_release_ready"], {"run_id": run_id, "node": None}
            ).fetchall()
            wakeups = Wakeups(queues={r[0] for r in ready})
            # nothing to redo (e.g. every step had completed): finish the run again
            self._complete_run_if_done(conn, run_id, wakeups)
        return [r[0] for r in reset], wakeups

    def list_failed_runs(self, flow: str | None = None) -> list[str]:
        """Ids of every failed run (optionally of one flow), oldest first."""
        with self.pool.connection() as conn:
            rows = conn.execute(self.q["run_list_failed"], {"flow": flow}).fetchall()
        return [str(r[0]) for r in rows]

    def _complete_run_if_done(self, conn: Conn, run_id: str, wakeups: Wakeups) -> RunState | None:
        done = conn.execute(self.q["run_complete_if_done"], {"run_id": run_id}).fetchone()
        if done is None:
            return None
        wakeups.runs_done.add(run_id)
        self.release_sequence_after(conn, run_id, wakeups)  # Sequences: the next run goes
        return RunState.COMPLETED

    # -- recovery sweep ------------------------------------------------------------------

    def rescue_expired(self, max_reclaims: int, batch: int) -> list[tuple[str, str, str, int]]:
        """Expired leases back to ``available`` (reclaims + 1, no attempt charged); return
        ``(run_id, node, queue, reclaims)`` per rescued step."""
        with self.pool.connection() as conn:
            rows = conn.execute(
                self.q["step_rescue_expired"], {"max_reclaims": max_reclaims, "batch": batch}
            ).fetchall()
        return [(str(r[1]), r[2], r[3], r[4]) for r in rows]

    def find_timed_out(self, batch: int) -> list[tuple[int, str, str, int]]:
        """Running steps past ``started_at + timeout``: ``(id, run_id, node, generation)``."""
        with self.pool.connection() as conn:
            rows = conn.execute(self.q["step_find_timed_out"], {"batch": batch}).fetchall()
        return [(r[0], str(r[1]), r[2], r[3]) for r in rows]

    def find_reclaim_exhausted(
        self, max_reclaims: int, batch: int
    ) -> list[tuple[int, str, str, int]]:
        """Expired leases of steps reclaimed ``max_reclaims`` times already."""
        with self.pool.connection() as conn:
            rows = conn.execute(
                self.q["step_find_reclaim_exhausted"],
                {"max_reclaims": max_reclaims, "batch": batch},
            ).fetchall()
        return [(r[0], str(r[1]), r[2], r[3]) for r in rows]

    # -- retention -----------------------------------------------------------------------

    def purge_runs(self, age_s: float, batch: int) -> int:
        """Delete up to ``batch`` terminal runs that finished more than ``age_s`` seconds
        ago (by the database's ``now()``), with their steps and deps; return how many runs
        were deleted. Safe from many clients at once (SKIP LOCKED)."""
        with self.pool.connection() as conn:
            rows = conn.execute(
                self.q["run_purge_terminal"],
                {"age_us": int(age_s * 1_000_000), "batch": batch},
            ).fetchall()
        return len(rows)

    def count_purgeable(self, age_s: float) -> tuple[int, int]:
        """``(runs, steps)`` that a purge with ``age_s`` would delete now (a dry run)."""
        with self.pool.connection() as conn:
            row = conn.execute(
                self.q["run_count_purgeable"], {"age_us": int(age_s * 1_000_000)}
            ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    # -- observability -------------------------------------------------------------------

    def queue_stats(self) -> list[QueueStats]:
        """Per queue with available or running steps: depth, delayed, running, and the
        age of the oldest claimable step (seconds, database clock)."""
        with self.pool.connection() as conn:
            rows = conn.execute(self.q["step_queue_stats"]).fetchall()
        return [QueueStats(r[0], int(r[1]), int(r[2]), int(r[3]), float(r[4])) for r in rows]

    # -- reads ---------------------------------------------------------------------------

    def count_active(self, queues: Sequence[str]) -> int:
        """Steps of ``queues`` that are available (at any time) or running."""
        with self.pool.connection() as conn:
            row = conn.execute(self.q["step_count_active"], {"queues": list(queues)}).fetchone()
        return int(row[0]) if row else 0

    def get_step_output_text(self, run_id: str, node: str) -> str | None:
        """The output of ``(run_id, node)`` as JSON text when that node completed, else
        None (Engine Design: Output Resolution)."""
        with self.pool.connection() as conn:
            row = conn.execute(
                self.q["step_output_get"], {"run_id": run_id, "node": node}
            ).fetchone()
        if row is None or row[1] != StepState.COMPLETED:
            return None
        return str(row[0])

    def get_run_input_text(self, run_id: str) -> str:
        """The input of a run as JSON text; raises :class:`RunNotFoundError`."""
        with self.pool.connection() as conn:
            row = conn.execute(self.q["run_input_get"], {"run_id": run_id}).fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return str(row[0])

    def get_run(self, run_id: str) -> RunStatus:
        """One run; raises :class:`RunNotFoundError`."""
        with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            row = cur.execute(self.q["run_get"], {"run_id": run_id}).fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return _run_status(row)

    def list_runs(
        self, *, flow: str | None = None, state: str | None = None, limit: int = 50
    ) -> list[RunStatus]:
        """The most recent runs, newest first."""
        with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            rows = cur.execute(
                self.q["run_list"], {"flow": flow, "state": state, "limit": limit}
            ).fetchall()
        return [_run_status(r) for r in rows]

    def list_steps(self, run_id: str) -> list[StepStatus]:
        """Every step of a run, in creation order (empty for an unknown run)."""
        with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            rows = cur.execute(self.q["step_list"], {"run_id": run_id}).fetchall()
        return [StepStatus(**{**r, "state": StepState(r["state"])}) for r in rows]

    # -- notifications -------------------------------------------------------------------

    def notify(self, conn: Conn | None, notes: Sequence[tuple[str, str]]) -> None:
        """Send ``(channel, payload)`` notifications in one statement that commits at once,
        on ``conn`` (an idle connection whose last transaction has committed; it is
        switched to autocommit for the statement and back) or, when None, on a pool
        connection. Call it only after the commit of the work it announces (Engine
        Design: LISTEN/NOTIFY and the Polling Floor). Raises psycopg errors."""
        if not notes:
            return
        params = {"channels": [n[0] for n in notes], "payloads": [n[1] for n in notes]}
        if conn is None:
            with self.pool.connection() as pooled:
                self._notify_autocommit(pooled, params)
        else:
            self._notify_autocommit(conn, params)

    def _notify_autocommit(self, conn: Conn, params: dict[str, list[str]]) -> None:
        with _autocommit(conn):  # one round trip: no BEGIN/COMMIT around the pg_notify
            conn.execute(self.q["notify_publish"], params)

    def listen(self, conn: Conn) -> None:
        """LISTEN on ``cyclone_available`` and ``cyclone_run_done`` on an autocommit
        ``conn`` (the listener's, held for the client's life)."""
        conn.execute(self.q["notify_listen"])

    def unlisten(self, conn: Conn) -> None:
        """UNLISTEN every channel on ``conn`` before it goes back to the pool."""
        conn.execute(self.q["notify_unlisten"])


@contextmanager
def _autocommit(conn: Conn) -> Iterator[None]:
    """Run the block's single statement in autocommit on an idle ``conn``, then restore."""
    if conn.autocommit:
        yield
        return
    conn.autocommit = True
    try:
        yield
    finally:
        if not conn.closed:
            conn.autocommit = False


def _run_status(row: dict[str, Any]) -> RunStatus:
    return RunStatus(
        id=str(row["id"]),
        flow_name=row["flow_name"],
        state=RunState(row["state"]),
        input=row["input"],
        output=row["output"],
        error=row["error"],
        error_kind=row["error_kind"],
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        digest=row["digest"],
    )

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
from cyclone_flow.flowfile.model import JSON, Flow
from cyclone_flow.flowfile.plan import flow_plan
from cyclone_flow.states import ErrorKind, RunState, StepState
from cyclone_flow.store import queries
from cyclone_flow.store.advance import Advance, RunAdvance, pipelined
from cyclone_flow.store.queue_store import QueueStoreMixin
from cyclone_flow.text import printable

Conn = psycopg.Connection[Any]

CHANNEL_AVAILABLE = "cyclone_available"
CHANNEL_RUN_DONE = "cyclone_run_done"


def dumps(value: JSON) -> str:
    """Encode a JSON value the way the engine stores it (compact, UTF-8 kept). Raises
    TypeError / ValueError for a value that is not JSON, including one nested too deeply
    for the encoder (about a thousand levels)."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except RecursionError:
        raise ValueError("the value is nested too deeply") from None


def contains_nul(value: JSON) -> bool:
    """True when a string (or key) inside ``value`` holds U+0000, which jsonb cannot store.
    Iterative, so any nesting depth is safe."""
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


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
    A fan-out item also has ``parent_node`` (its fan-out node), ``item_index`` (0-based)
    and ``item`` (its list element). ``run_input_text`` is the run's input as JSON text
    when the claim prefetched it (the node may need it), else None (Output Resolution).
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
    parent_node: str | None = None
    item_index: int | None = None
    item: JSON = None
    run_input_text: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What a committed transition did to the run: the step's new state, the run's new
    state when it became terminal in the same transaction, and the wakeups to publish
    (``queue``: the step's queue, when the transition reports it; ``output_text``: a
    completed step's output as the database stores it, JSON text)."""

    step_state: StepState
    run_state: RunState | None
    wakeups: Wakeups
    cancelled: tuple[str, ...] = ()
    queue: str | None = None
    engine_events: tuple[tuple[str, str, str, str | None, str | None], ...] = ()
    output_text: str | None = None


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
    parent_run_id: str | None = None
    parent_node: str | None = None
    deadline_at: datetime | None = None


@dataclass(frozen=True)
class StepStatus:
    """One row of ``cyclone_steps`` as reported by ``status`` and ``list_steps``.

    Node-type fields: ``parent_node`` and ``item_index`` (a fan-out item), ``items_total``
    and ``items_done`` (a started fan-out node), ``signal`` (a wait_signal node),
    ``child_run_id`` (a started child node), ``wait_until`` (when a child or signal wait
    expires; None: no bound).
    """

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
    parent_node: str | None = None
    item_index: int | None = None
    items_total: int | None = None
    items_done: int | None = None
    signal: str | None = None
    wait_until: datetime | None = None
    child_run_id: str | None = None


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


class Store(RunAdvance, QueueStoreMixin):
    """Typed access to the engine's tables in one Postgres schema.

    ``pool`` provides connections; ``schema`` must be a validated identifier. The
    in-transaction advance of runs (release, node types, completion, failure
    propagation) is in :class:`cyclone_flow.store.advance.RunAdvance`.
    """

    def __init__(self, pool: ConnectionPool[Any], schema: str) -> None:
        self.pool = pool
        self.schema = schema
        self.q = queries.render(schema)

    # -- submit --------------------------------------------------------------------------

    def store_definition(self, conn: Conn, flow: Flow) -> int:
        """Store ``flow`` once per ``(name, digest)`` with its compiled plan (child flows
        first: the plan names their stored definitions) in the caller's transaction; return
        its id. Runs are inserted from the plan (:meth:`insert_run`)."""
        child_ids = {
            node: self.store_definition(conn, child) for node, child in flow.children.items()
        }
        plan = dumps(flow_plan(flow, child_ids))
        row = None
        for _ in range(2):  # a concurrent first insert of the same digest: read it back
            row = conn.execute(
                self.q["workflow_upsert"],
                {
                    "name": flow.name,
                    "digest": flow.digest,
                    "definition": dumps(flow.document),
                    "plan": plan,
                },
            ).fetchone()
            if row:
                break
        if row is None:
            raise RuntimeError(f"could not store the definition of flow {flow.name!r}")
        if row[1]:
            conn.execute(self.q["workflow_fill_plan"], {"id": row[0], "plan": plan})
        return int(row[0])

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
        seconds. One statement per queue, each in autocommit: one round trip, no
        BEGIN/COMMIT around it (the claim is as atomic; the enqueue-to-claim latency is
        shorter), and ``queue = $1`` lets Postgres walk the claim index in order. With
        several queues, each is claimed in turn with what the previous left of ``limit``
        (the worker's claim loop passes one queue at a time)."""
        statement = self.q["step_claim" if run_id is None else "step_claim_run"]
        rows: list[Any] = []
        with self.pool.connection() as conn, _autocommit(conn):
            for queue_name in queues:
                if len(rows) >= limit:
                    break
                rows += conn.execute(
                    statement,
                    {
                        "queue": queue_name,
                        "limit": limit - len(rows),
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
                parent_node=r[13],
                item_index=r[14],
                item=r[15],
                run_input_text=r[16],
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
        leases = sorted(leases)  # in id order, as a group commit sends its rows
        with self.pool.connection() as conn:
            rows = conn.execute(
                self.q["step_extend_lease_many"],
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
                self.q["step_release_lease_many"],
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
        """Take the run row lock for the rest of the caller's transaction (for a child
        run: the top run's lock first); return the run's state (None when the run no
        longer exists)."""
        rows = conn.execute(self.q["run_lock"], {"run_id": run_id}).fetchall()
        own = [r[1] for r in rows if r[0]]
        return RunState(own[0]) if own else None

    def complete_step(
        self, conn: Conn, step: ClaimedStep, owner: str, output_json: str
    ) -> Outcome | None:
        """running -> completed and advance the run, in the caller's transaction: release
        dependents whose deps all completed (starting fan-out, child and wait_signal
        nodes), complete the run when nothing is left (and a parent's child node with
        it); a fan-out item releases the next item or completes its fan-out node.
        Returns None when stale (the caller must roll back, business writes included).
        Raises the psycopg error of a failed statement (the transaction is then failed and
        must be rolled back; the connection stays usable).

        One network round trip for the run lock, the step's compare-and-swap and (not for
        a fan-out item) the release of its dependents and the run's completion, sent in
        psycopg pipeline mode; further round trips only for what that starts (a fan-out,
        child or wait_signal node, a finished run's parent or sequence)."""
        # Why one pipeline is the same as the statements one by one:
        # - statements of a pipeline execute in order in this transaction: run_lock takes
        #   the run row lock (top run first) before the step's UPDATE executes, as always;
        # - the release and the run's completion are sent before we know whether the CAS
        #   changed a row. Both are guarded, idempotent functions of the run's rows (see
        #   _send_node_advance): after a completion they do what _node_completed did; after
        #   a stale one (zero rows) they change nothing, and the caller rolls the whole
        #   transaction back anyway (executor._complete: tx.rollback() on None);
        # - a fan-out item's fan_out_item_done counts unconditionally (not idempotent), so
        #   it is sent only after the CAS returned its row (_item_completed);
        # - an error of any statement (e.g. a handler left its completion_tx failed) is
        #   raised when the pipeline block ends, as the same psycopg error: the executor's
        #   _failed_attempt_on_error turns it into the same failed attempt as before, and the
        #   connection has left pipeline mode, so its rollback works as before.
        item = step.parent_node is not None
        with pipelined(conn):
            conn.execute(self.q["session_force_generic_plans"])
            conn.execute(self.q["run_lock"], {"run_id": step.run_id})
            completed = conn.execute(
                self.q["step_complete_if_leased"],
                {
                    "id": step.id,
                    "owner": owner,
                    "generation": step.lease_generation,
                    "output": output_json,
                },
            )
            sent = None if item else self._send_node_advance(conn, step.run_id, step.node)
        row = completed.fetchone()
        if row is None:
            return None
        acc = Advance(Wakeups())
        if sent is None:  # a fan-out item (row[1]: its fan-out node, step.parent_node)
            self._item_completed(conn, step.run_id, row[1], acc)
        else:
            self._node_advanced(conn, step.run_id, sent, acc)
        return _completed(acc, step.run_id, row[2])

    def complete_steps(
        self, conn: Conn, owner: str, batch: Sequence[tuple[ClaimedStep, str]]
    ) -> list[Outcome | None]:
        """Group commit (issue 8): :meth:`complete_step` for a batch of ``(step,
        output_json)`` of steps whose handlers did not open ``ctx.completion_tx()``, in
        the caller's one transaction. The run row locks of the whole batch are taken
        first, in one global order (``run_lock_many``); one statement completes every
        step, each row guarded by its own claim (Engine Design: CAS State Transitions);
        then the runs advance as one :meth:`complete_step` per step would, in a few
        set-based statements, the first ones in the same round trip
        (:meth:`_advance_completed`). Returns one entry per ``batch``
        entry, in order: its Outcome (what its run's advance did is reported with the
        run's last step of the batch), or None when stale.
        Raises ``psycopg.Error`` when the transaction failed (nothing of it commits)."""
        if not batch:
            return []
        nodes = [(s.run_id, s.node) for s, _ in batch if s.parent_node is None]
        node_runs = sorted({run_id for run_id, _ in nodes})
        # One round trip (statements run in order: the locks before everything). The
        # release and the run completion are sent for every node of the batch before the
        # UPDATE's result is known: both are guarded by the rows they change ("every
        # dependency completed", "no non-terminal step left"), so for a node whose step
        # turned out stale they change nothing that was not already due. The item counts
        # are not idempotent: they follow the UPDATE's result (_advance_completed).
        with pipelined(conn):
            conn.execute(self.q["session_force_generic_plans"])
            conn.execute(self.q["run_lock_many"], {"run_ids": sorted({s.run_id for s, _ in batch})})
            # rows in id order, as the heartbeat sends them (where the plan walks the
            # arrays, both lock in one order)
            ordered = sorted(batch, key=lambda entry: entry[0].id)
            completing = conn.execute(
                self.q["step_complete_if_leased_many"],
                {
                    "ids": [s.id for s, _ in ordered],
                    "generations": [s.lease_generation for s, _ in ordered],
                    "outputs": [output for _, output in ordered],
                    "owner": owner,
                },
            )
            releasing = finishing = None
            if nodes:
                releasing = conn.execute(
                    self.q["step_release_dependents"],
                    {"run_ids": [r for r, _ in nodes], "nodes": [n for _, n in nodes]},
                )
                finishing = conn.execute(self.q["run_complete_if_done"], {"run_ids": node_runs})
        completed = {(r[0], r[1]): r for r in completing.fetchall()}
        items: dict[tuple[str, str], int] = {}
        last: dict[str, int] = {}  # run id -> index in batch of its last completed step
        for i, (step, _) in enumerate(batch):
            row = completed.get((step.id, step.lease_generation))
            if row is None:
                continue
            last[step.run_id] = i
            if row[3] is not None:  # a fan-out item
                key = (step.run_id, row[3])
                items[key] = items.get(key, 0) + 1
        accs = {run_id: Advance(Wakeups()) for run_id in {s.run_id for s, _ in batch}}
        self._advance_completed(
            conn,
            releasing.fetchall() if releasing is not None else [],
            items,
            finishing.fetchall() if finishing is not None else [],
            accs,
        )
        # what a run's advance did is reported with its last step of the batch
        outcomes: list[Outcome | None] = []
        for i, (step, _) in enumerate(batch):
            row = completed.get((step.id, step.lease_generation))
            if row is None:
                outcomes.append(None)
            elif last[step.run_id] != i:
                outcomes.append(Outcome(StepState.COMPLETED, None, Wakeups(), output_text=row[4]))
            else:
                outcomes.append(_completed(accs[step.run_id], step.run_id, row[4]))
        # a run none of whose steps completed here (all stale) cannot have advanced;
        # should it have, its wakeups still go out with the batch
        reported = next((o for o in reversed(outcomes) if o is not None), None)
        for run_id, acc in accs.items():
            if run_id not in last and reported is not None:
                reported.wakeups.merge(acc.wakeups)
        return outcomes

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
        backoff: bool = True,
    ) -> Outcome | None:
        """A failed attempt, in the caller's transaction under the run row lock: retry
        after backoff while attempts remain (and not ``permanent``), else discard and
        resolve the run (Engine Design: Failure Propagation). ``owner`` None lets the
        recovery sweep fail a step it does not own; the generation still guards it.
        ``timed_out``: only when ``started_at + timeout`` has passed (a timeout failure).
        ``backoff`` False: retry at once, without reading the step's backoff (see
        :meth:`fail_step_alone`). Returns None when stale. The run lock and the attempt's
        compare-and-swap go in one round trip (a pipeline: executed in that order, see
        :meth:`complete_step`). Raises ``psycopg.DataError`` when the stored backoff
        cannot be computed (the transaction is then failed)."""
        error = printable(error) or ""
        traceback = printable(traceback)
        statement = "step_fail_if_leased" if backoff else "step_fail_without_backoff_if_leased"
        with pipelined(conn):
            conn.execute(self.q["run_lock"], {"run_id": run_id})
            failed = conn.execute(
                self.q[statement],
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
            )
        row = failed.fetchone()
        if row is None:
            return None
        node, state, queue, parent = row[1], StepState(row[2]), row[3], row[5]
        wakeups = Wakeups()
        if state is StepState.AVAILABLE:
            wakeups.queues.add(queue)
            return Outcome(state, None, wakeups, queue=queue)
        acc = Advance(wakeups)
        if parent is not None:  # a fan-out item: its fan-out node is discarded
            self._item_discarded(conn, run_id, node, parent, error, acc)
        else:
            self._resolve_discard(conn, run_id, node, error, acc)
        return Outcome(
            state,
            acc.finished.get(run_id),
            wakeups,
            acc.cancelled_in(run_id),
            queue=queue,
            engine_events=tuple(acc.events),
        )

    def fail_step_alone(self, **kwargs: Any) -> tuple[Outcome | None, psycopg.DataError | None]:
        """:meth:`fail_step` (same keyword arguments, no ``conn``) in a transaction of its
        own on a pool connection, committed before it returns.

        When the step's stored backoff cannot be computed (``psycopg.DataError``, e.g. a
        definition written by hand or by an older version), the attempt is recorded all
        the same in a fresh transaction, without backoff: retried at once while attempts
        remain, else discarded, with a note in its error. A failed attempt is thus never
        left to its lease (which would re-run the step at every reclaim, for ever).

        Returns ``(outcome, error)``: the outcome (None when stale) and the data error of
        the first try (None when there was none), for the caller to log.
        """
        try:
            with self.pool.connection() as conn, conn.transaction():
                return self.fail_step(conn, **kwargs), None
        except psycopg.DataError as exc:
            first = exc
        reason = str(first).strip().splitlines()[0] if str(first).strip() else type(first).__name__
        kwargs["error"] = (
            f"{kwargs.get('error') or ''} [no retry backoff: it could not be computed ({reason})]"
        ).lstrip()
        with self.pool.connection() as conn, conn.transaction():
            return self.fail_step(conn, backoff=False, **kwargs), first

    # -- operator actions ----------------------------------------------------------------

    def cancel_run(
        self, run_id: str, reason: str, wakeups: Wakeups | None = None
    ) -> tuple[bool, tuple[str, ...]]:
        """running -> cancelled and every non-terminal step -> cancelled, under the run
        lock, with the trees of its child runs; a cancelled child run discards the node of
        its parent that waited for it (kind ``child_failed``). A failed run of a sequence
        can be cancelled too, which lets the runs held behind it go on (released in the
        same transaction). Returns ``(False, ())`` when the run was already terminal (a
        racing completion won), else ``(True, cancelled nodes)``; the wakeups of every run
        this ended or released go to ``wakeups``, which the caller publishes after the
        commit. Raises RunNotFoundError."""
        acc = Advance(wakeups if wakeups is not None else Wakeups())
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
            parent = (str(done[1]), done[2]) if done is not None and done[1] is not None else None
            self._run_ended(conn, run_id, RunState.CANCELLED, parent, reason, acc)
            self.release_sequence_after(conn, run_id, acc)  # Sequences: the next run goes
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
            parent = conn.execute(self.q["run_get"], {"run_id": run_id}).fetchone()
            if parent is not None and parent[10] is not None:
                raise RunStateError(
                    run_id,
                    state,
                    f"it is a child run of run {parent[10]} (node {parent[11]}): retry the "
                    "parent run, which starts a new child run",
                )
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
                if row[1] is not None:
                    raise RunStateError(
                        run_id,
                        state,
                        f"{node!r} is an item of fan-out node {row[1]!r}: retry that node",
                    )
                if row[0] not in (StepState.DISCARDED, StepState.CANCELLED):
                    raise RunStateError(
                        run_id, state, f"node {node!r} is {row[0]}, not discarded or cancelled"
                    )
            conn.execute(self.q["run_reopen_if_terminal"], {"run_id": run_id})
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
                    self.q["dep_list_downstream"], {"run_id": run_id, "node": blocker}
                ).fetchall()
                if reset_nodes & {r[0] for r in below}:
                    raise RunStateError(
                        run_id,
                        state,
                        f"node {node!r} is downstream of the discarded node {blocker!r}: "
                        f"retry {blocker!r} or the whole run",
                    )
            wakeups = Wakeups()
            acc = Advance(wakeups)
            self._release(conn, run_id, None, acc)
            # nothing to redo (e.g. every step had completed): finish the run again
            self._complete_run_if_done(conn, run_id, acc)
        return [r[0] for r in reset if r[1] is None], wakeups

    def list_failed_runs(self, flow: str | None = None) -> list[str]:
        """Ids of every failed run (optionally of one flow), oldest first."""
        with self.pool.connection() as conn:
            rows = conn.execute(self.q["run_list_failed"], {"flow": flow}).fetchall()
        return [str(r[0]) for r in rows]

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
            rows = conn.execute(self.q["step_list_timed_out"], {"batch": batch}).fetchall()
        return [(r[0], str(r[1]), r[2], r[3]) for r in rows]

    def find_reclaim_exhausted(
        self, max_reclaims: int, batch: int
    ) -> list[tuple[int, str, str, int]]:
        """Expired leases of steps reclaimed ``max_reclaims`` times already."""
        with self.pool.connection() as conn:
            rows = conn.execute(
                self.q["step_list_reclaim_exhausted"],
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
            rows = conn.execute(self.q["step_count_by_queue"]).fetchall()
        return [QueueStats(r[0], int(r[1]), int(r[2]), int(r[3]), float(r[4])) for r in rows]

    # -- reads ---------------------------------------------------------------------------

    def count_active(self, queues: Sequence[str]) -> int:
        """Steps of ``queues`` that are available (at any time) or running."""
        with self.pool.connection() as conn:
            row = conn.execute(self.q["step_count_active"], {"queues": list(queues)}).fetchone()
        return int(row[0]) if row else 0

    def get_step_output_text(self, run_id: str, node: str) -> str | None:
        """The output of ``(run_id, node)`` as JSON text when that node completed, else
        None (Engine Design: Output Resolution). One statement in autocommit."""
        with self.pool.connection() as conn, _autocommit(conn):
            row = conn.execute(
                self.q["step_get_output"], {"run_id": run_id, "node": node}
            ).fetchone()
        if row is None or row[1] != StepState.COMPLETED:
            return None
        return str(row[0])

    def get_run_input_text(self, run_id: str) -> str:
        """The input of a run as JSON text; raises :class:`RunNotFoundError`. One statement
        in autocommit."""
        with self.pool.connection() as conn, _autocommit(conn):
            row = conn.execute(self.q["run_get_input"], {"run_id": run_id}).fetchone()
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

    def list_steps(self, run_id: str, *, items: bool = True) -> list[StepStatus]:
        """Every step of a run, in creation order (empty for an unknown run); fan-out
        item steps only when ``items``."""
        with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            rows = cur.execute(self.q["step_list"], {"run_id": run_id, "items": items}).fetchall()
        return [
            StepStatus(
                **{
                    **r,
                    "state": StepState(r["state"]),
                    "child_run_id": None if r["child_run_id"] is None else str(r["child_run_id"]),
                }
            )
            for r in rows
        ]

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


def _completed(acc: Advance, run_id: str, output_text: str | None) -> Outcome:
    """The Outcome of a completed step of run ``run_id`` whose advance ``acc`` collected."""
    return Outcome(
        StepState.COMPLETED,
        acc.finished.get(run_id),
        acc.wakeups,
        acc.cancelled_in(run_id),
        engine_events=tuple(acc.events),
        output_text=output_text,
    )


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
        parent_run_id=None if row["parent_run_id"] is None else str(row["parent_run_id"]),
        parent_node=row["parent_node"],
        deadline_at=row["deadline_at"],
    )

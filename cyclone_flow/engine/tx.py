"""The transaction every transition runs in, and what it collects.

A :class:`Tx` is a connection inside a transaction the caller owns, the statements
qualified for its schema and the :class:`Effects` the transitions collect: the wakeups to
publish after the commit (collected here and nowhere else), the runs that became
terminal, the steps cancelled and the nodes the engine decided. Nothing in
``cyclone_flow.engine`` commits; :func:`transaction` is the one helper that opens a pool
connection and a transaction, commits, and then hands the wakeups to the publisher.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from cyclone_flow.db.conn import Conn, Database, Statements
from cyclone_flow.notify import Publish, Wakeups
from cyclone_flow.states import ErrorKind, EventKind, RunState, StepState


@dataclass(frozen=True)
class EngineEvent:
    """A node the engine completed or discarded (a fan-out, child or wait_signal node, not
    a worker): reported as a step event after the commit; ``kind`` is
    ``EventKind.COMPLETED`` or ``EventKind.DISCARDED``; ``queue`` the node's queue."""

    kind: EventKind
    run_id: str
    node: str
    error: str | None = None
    error_kind: str | None = None
    queue: str | None = None


@dataclass
class Effects:
    """What one transaction did to runs: ``wakeups`` to publish after the commit,
    ``finished`` runs (run id -> new terminal state), ``cancelled`` steps as ``(run_id,
    node)``, ``events`` of nodes the engine decided."""

    wakeups: Wakeups = field(default_factory=Wakeups)
    finished: dict[str, RunState] = field(default_factory=dict)
    cancelled: list[tuple[str, str]] = field(default_factory=list)
    events: list[EngineEvent] = field(default_factory=list)

    def cancelled_in(self, run_id: str) -> tuple[str, ...]:
        """The nodes of ``run_id`` this transaction cancelled."""
        return tuple(node for rid, node in self.cancelled if rid == run_id)


@dataclass(frozen=True)
class Tx:
    """A connection inside the caller's transaction, the statements of its schema, and the
    :class:`Effects` its transitions collect. Every ``cyclone_flow.db`` function accepts
    it as its session."""

    conn: Conn
    q: Statements
    effects: Effects = field(default_factory=Effects)

    def fresh(self) -> Tx:
        """The same transaction with effects of its own (one per run of a group commit)."""
        return Tx(self.conn, self.q, Effects())


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
    engine_events: tuple[EngineEvent, ...] = ()
    output_text: str | None = None


@dataclass(frozen=True)
class Discard:
    """A decision of a lower module (``fan_out``, ``child_runs``): discard the waiting node
    with ``error`` of ``kind``; :mod:`cyclone_flow.engine.advance` applies it."""

    error: str
    kind: ErrorKind


@contextmanager
def transaction(db: Database, publish: Publish | None = None) -> Iterator[Tx]:
    """A :class:`Tx` in a READ COMMITTED transaction of its own on a pool connection of
    ``db`` (:meth:`Database.transaction`).

    The block's work commits when it ends; then, on the same (now idle) connection, the
    wakeups the block collected go to ``publish`` (nothing is published for a block that
    raised: it rolled back). Raises what the block raised."""
    holder: list[Tx] = []

    def published(conn: Conn) -> None:
        if publish is not None and holder and holder[0].effects.wakeups:
            publish(holder[0].effects.wakeups, conn)

    with db.transaction(after=published) as conn:
        tx = Tx(conn, db.q)
        holder.append(tx)
        yield tx

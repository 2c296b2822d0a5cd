"""Advancing a run inside the transaction that changed it (part of the store: it runs SQL).

Everything here runs in the caller's transaction, under the run row lock (which, for a
child run, is taken after the lock of the top run of its tree: :meth:`Store.lock_run`),
and collects what it did in an :class:`Advance`: the wakeups to publish after the commit,
the runs that became terminal, the steps it cancelled. Nothing here commits.

The node types (Engine Design: Why Static DAGs; Failure Propagation):

- ``action``: released ``available``; a worker claims it.
- ``fan_out``: released ``waiting``; in the same transaction the list ``over`` is
  resolved in the database and one item step per element is inserted by one
  ``INSERT ... SELECT`` over ``jsonb_array_elements``. At most ``max_parallel`` items are
  ``available`` or ``running`` at once: the rest wait ``pending`` and each item's
  terminal transition releases the next in item order. When the last item completes, the
  node completes with the item outputs in item order (``jsonb_agg``), bounded by the
  output limit of the client that submitted the run; a finally discarded item discards
  the node (kind ``item_failed``) and cancels its other items. A list longer than
  :data:`MAX_FAN_OUT_ITEMS` discards the node (kind ``fan_out_too_large``); an empty list
  completes it with ``[]`` at once.
- ``child``: released ``waiting``; in the same transaction the child run is inserted
  (from the child definition stored at the parent's submit) with its steps and deps. The
  child run's completion completes the node with the child's output in the child's
  completion transaction; a failed or cancelled child run discards it (kind
  ``child_failed``). Ending the parent run cancels the child's whole tree.
- ``wait_signal``: released ``waiting``; a signal that arrived earlier is consumed at
  once, in the same transaction; otherwise :meth:`deliver_signal` completes it later with
  the signal's payload.

``child`` and ``wait_signal`` nodes with a ``max_wait`` (or a wait_signal node under the
submitting client's ``max_signal_wait``) get a ``wait_until``; the wait scanner discards
them with kind ``timeout`` after it.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg_pool import ConnectionPool

from cyclone_flow.errors import (
    InputValidationError,
    RunNotFoundError,
    RunStateError,
    SignalRejectedError,
    TemplateError,
)
from cyclone_flow.flowfile.inputs import validate_input
from cyclone_flow.flowfile.model import JSON
from cyclone_flow.flowfile.template import parse_ref, render
from cyclone_flow.states import ErrorKind, RunState, StepState

if TYPE_CHECKING:
    from cyclone_flow.store.queue_store import SequenceLookup

Conn = psycopg.Connection[Any]
Cursor = psycopg.Cursor[Any]

_PIPELINE = psycopg.Pipeline.is_supported()  # libpq >= 14 (the binary wheels bundle it)


def pipelined(conn: Conn) -> AbstractContextManager[Any]:
    """Send the block's statements in one network round trip (psycopg pipeline mode): they
    execute in order in the caller's transaction, and their results are read from their
    cursors after the block. A database error of any of them is raised when the block
    ends (the first one; the statements after it are skipped and the transaction is
    failed, as after a statement sent alone), and the connection has left pipeline mode
    by then. Without pipeline support in libpq, the statements go one by one."""
    return conn.pipeline() if _PIPELINE else nullcontext()


MAX_FAN_OUT_ITEMS = 100_000
"""Most items one fan-out node may have (Client Options: Limits and Retention,
``cyclone.MaxFanOutItems``). A constant, not an option: every item is a row of
``cyclone_steps`` inserted in the transaction that completes the upstream step, so this
bounds that transaction (100,000 rows take a few seconds). A longer list discards the
node with error_kind ``fan_out_too_large``."""


@dataclass
class Advance:
    """What one transaction did to runs: ``wakeups`` to publish after the commit,
    ``finished`` runs (run id -> new terminal state), ``cancelled`` steps as
    ``(run_id, node)``, ``events`` of nodes the engine decided."""

    wakeups: Any  # store.Wakeups (kept untyped here to avoid an import cycle)
    finished: dict[str, RunState] = field(default_factory=dict)
    cancelled: list[tuple[str, str]] = field(default_factory=list)
    events: list[tuple[str, str, str, str | None, str | None]] = field(default_factory=list)
    """Nodes the engine completed or discarded (fan-out, child and wait_signal nodes):
    ``(kind, run_id, node, error, error_kind)``, kind ``completed`` or ``discarded``."""

    def cancelled_in(self, run_id: str) -> tuple[str, ...]:
        """The nodes of ``run_id`` this transaction cancelled."""
        return tuple(node for rid, node in self.cancelled if rid == run_id)


class RunAdvance:
    """Mixin of :class:`cyclone_flow.store.store.Store`: the in-transaction engine, and
    the transactions of signals and of the wait and deadline scanners."""

    q: dict[str, str]
    pool: ConnectionPool[Any]

    if TYPE_CHECKING:

        def lock_run(self, conn: Conn, run_id: str) -> RunState | None: ...

        def release_sequence_after(
            self,
            conn: Conn,
            run_id: str,
            acc: Advance,
            sequence_key: str | SequenceLookup | None = ...,
        ) -> None: ...

    # -- signals (Client.signal) ---------------------------------------------------------

    def deliver_signal(
        self, run_id: str, name: str, payload_json: str
    ) -> tuple[str | None, Advance]:
        """Keep signal ``name`` with ``payload_json`` for run ``run_id`` and, when a
        wait_signal node of the run waits for it, consume it at once: the node completes
        with the payload and the run advances, in one transaction under the run lock.
        Returns the node that consumed it (None: kept until a node starts waiting for it)
        and the transaction's effects (wakeups to publish, events).

        Raises RunNotFoundError (no such run), RunStateError (the run is finished),
        SignalRejectedError (no node of the run awaits ``name``, or every such node has a
        signal kept already); nothing is written then.
        """
        from cyclone_flow.store.store import Wakeups

        acc = Advance(Wakeups())
        with self.pool.connection() as conn, conn.transaction():
            state = self.lock_run(conn, run_id)
            if state is None:
                raise RunNotFoundError(run_id)
            if state.terminal:
                raise RunStateError(run_id, state, "signals are delivered to running runs only")
            room = conn.execute(
                self.q["signal_count_awaiting"], {"run_id": run_id, "name": name}
            ).fetchone()
            awaiting, stored = room if room else (0, 0)
            if awaiting == 0:
                raise SignalRejectedError(
                    run_id, name, "no wait_signal node of the run waits for it (any more)"
                )
            if stored >= awaiting:
                raise SignalRejectedError(
                    run_id,
                    name,
                    f"each of the {awaiting} node(s) waiting for it has a signal kept already",
                )
            conn.execute(
                self.q["signal_insert"], {"run_id": run_id, "name": name, "payload": payload_json}
            )
            row = conn.execute(
                self.q["step_get_signal_waiter"], {"run_id": run_id, "name": name}
            ).fetchone()
            consumed = None
            if row is not None and self._consume_signal(conn, run_id, row[0], name, acc):
                consumed = str(row[0])
        return consumed, acc

    # -- wait scanner --------------------------------------------------------------------

    def find_expired_waits(
        self, batch: int
    ) -> list[tuple[str, str, str, str | None, str | None, float | None]]:
        """Waiting child and wait_signal nodes past ``wait_until``: ``(run_id, node,
        type, signal, child_run_id, waited seconds)``."""
        with self.pool.connection() as conn:
            rows = conn.execute(self.q["step_list_expired_waits"], {"batch": batch}).fetchall()
        return [
            (str(r[0]), r[1], r[2], r[3], None if r[4] is None else str(r[4]), r[5]) for r in rows
        ]

    def expire_wait(self, run_id: str, node: str, error: str) -> Advance | None:
        """Discard a waiting node whose ``wait_until`` passed (kind ``timeout``), cancel
        the tree of the child run it waited for, and apply its dependents' policy, in one
        transaction under the run lock. None when stale (decided meanwhile)."""
        from cyclone_flow.store.store import Wakeups

        acc = Advance(Wakeups())
        with self.pool.connection() as conn, conn.transaction():
            self.lock_run(conn, run_id)
            row = conn.execute(
                self.q["step_discard_if_wait_expired"],
                {"run_id": run_id, "node": node, "error": error},
            ).fetchone()
            if row is None:
                return None
            if row[1] is not None:
                self._cancel_tree(
                    conn, str(row[1]), True, f"parent node {node} stopped waiting: {error}", acc
                )
            self._resolve_discard(conn, run_id, node, error, acc)
        return acc

    # -- deadline scanner ----------------------------------------------------------------

    def find_past_deadline(self, batch: int) -> list[str]:
        """Running runs past their flow's deadline."""
        with self.pool.connection() as conn:
            rows = conn.execute(self.q["run_list_past_deadline"], {"batch": batch}).fetchall()
        return [str(r[0]) for r in rows]

    def fail_past_deadline(self, run_id: str) -> tuple[Advance, tuple[str, ...], str] | None:
        """running -> failed with kind ``deadline``: its unfinished steps are cancelled,
        its child runs too, and the node of a parent run waiting for it is discarded (kind
        ``child_failed``), in one transaction under the run lock. Returns the effects, the
        cancelled nodes and the run's error; None when stale."""
        from cyclone_flow.store.store import Wakeups

        acc = Advance(Wakeups())
        with self.pool.connection() as conn, conn.transaction():
            self.lock_run(conn, run_id)
            row = conn.execute(self.q["run_fail_if_past_deadline"], {"run_id": run_id}).fetchone()
            if row is None:
                return None
            error = str(row[3])
            rows = conn.execute(
                self.q["step_cancel_remaining"], {"run_id": run_id, "error": error}
            ).fetchall()
            parent = (str(row[1]), row[2]) if row[1] is not None else None
            self._run_ended(conn, run_id, RunState.FAILED, parent, error, acc)
        return acc, tuple(r[0] for r in rows), error

    # -- reads ---------------------------------------------------------------------------

    def fan_out_progress(self, run_id: str) -> dict[str, dict[str, int]]:
        """Item counts of each started fan-out node of a run: node -> state -> count."""
        with self.pool.connection() as conn:
            rows = conn.execute(self.q["step_count_items"], {"run_id": run_id}).fetchall()
        out: dict[str, dict[str, int]] = {}
        for node, state, count in rows:
            out.setdefault(node, {})[state] = int(count)
        return out

    def run_definition(self, run_id: str) -> dict[str, Any]:
        """The flow document a run was submitted with; raises RunNotFoundError."""
        with self.pool.connection() as conn:
            row = conn.execute(self.q["run_get_definition"], {"run_id": run_id}).fetchone()
        if row is None:
            raise RunNotFoundError(run_id)
        return dict(row[0])

    # -- reads inside the transaction ----------------------------------------------------

    def _tx_run_input(self, conn: Conn, run_id: str) -> JSON:
        row = conn.execute(self.q["run_get_input"], {"run_id": run_id}).fetchone()
        return None if row is None else _loads(row[0])

    def _tx_output(self, conn: Conn, run_id: str, node: str) -> JSON:
        row = conn.execute(self.q["step_get_output"], {"run_id": run_id, "node": node}).fetchone()
        if row is None or row[1] != StepState.COMPLETED:
            raise TemplateError(f"node {node!r} of run {run_id} has not completed")
        return _loads(row[0])

    def _tx_render(self, conn: Conn, run_id: str, template: JSON) -> JSON:
        """Render a node's template with the run's data (None: the run input)."""
        if template is None:
            return self._tx_run_input(conn, run_id)
        run_input = self._tx_run_input(conn, run_id)
        return render(template, run_input, lambda name: self._tx_output(conn, run_id, name))

    # -- runs: insert --------------------------------------------------------------------

    def _insert_run_steps(
        self,
        conn: Conn,
        run_id: str,
        workflow_id: int,
        root_run_id: str | None,
        acc: Advance,
        *,
        queue: str | None = None,
        priority: int | None = None,
        hold: bool = False,
        run_at: datetime | None = None,
        delay_us: int | None = None,
    ) -> None:
        """Insert the steps and deps of a new run from its definition's plan, then start
        its root nodes that are not actions (none when ``hold``: a held run of a sequence,
        released later by the same :meth:`_release`). ``queue``/``priority`` replace those
        of the nodes that do not set their own; ``run_at`` or ``delay_us`` (microseconds
        from now) is when the run starts: no step of it is claimable before then."""
        rows = conn.execute(
            self.q["step_insert_plan"],
            {
                "run_id": run_id,
                "root_run_id": root_run_id,
                "workflow_id": workflow_id,
                "queue": queue,
                "priority": priority,
                "hold": hold,
                "run_at": run_at,
                "delay_us": delay_us,
            },
        ).fetchall()
        acc.wakeups.queues.update(r[0] for r in rows if r[1] == StepState.AVAILABLE and r[2])
        conn.execute(self.q["dep_insert_plan"], {"run_id": run_id, "workflow_id": workflow_id})
        if not hold and any(r[1] == StepState.PENDING for r in rows):
            self._release(conn, run_id, None, acc)

    # -- group commit ------------------------------------------------------------------

    def _advance_completed(
        self,
        conn: Conn,
        released: list[Any],
        items: dict[tuple[str, str], int],
        finished: list[Any],
        accs: dict[str, Advance],
    ) -> None:
        """Go on with the advance of a group commit's runs (:meth:`Store.complete_steps`)
        after its set-based statements: ``released`` the rows ``step_release_dependents``
        returned for the batch's completed nodes, ``items`` the count of completed items
        per ``(run_id, fan-out node)``, ``finished`` the rows ``run_complete_if_done``
        returned for the batch's runs; ``accs`` one Advance per run id of the batch. The
        end state is that of one :meth:`_node_completed` / :meth:`_item_completed` per
        step: released actions wake their queue and other released nodes start, each
        fan-out node counts its items in one statement, and each completed run completes
        its parent's node or releases the next run of its sequence."""
        for row in released:
            run_id = str(row[0])
            self._start_released(conn, run_id, [row], accs[run_id])
        for (run_id, parent), n in items.items():
            self._item_completed(conn, run_id, parent, accs[run_id], n)
        for done in finished:
            run_id = str(done[0])
            self._run_completed(conn, run_id, done, accs[run_id])

    # -- release and start -------------------------------------------------------------

    def _release(self, conn: Conn, run_id: str, node: str | None, acc: Advance) -> bool:
        """Release the dependents of ``node`` whose deps all completed (``node`` None:
        every ready pending node); start those that are not actions. Returns whether any
        node was released."""
        if node is None:
            cursor = conn.execute(self.q["step_release_ready"], {"run_id": run_id})
        else:
            cursor = self._send_release(conn, run_id, node)
        released = cursor.fetchall()
        self._start_released(conn, run_id, released, acc)
        return bool(released)

    def _send_release(self, conn: Conn, run_id: str, node: str) -> Cursor:
        """Send ``step_release_dependents`` for the one completed ``node``."""
        return conn.execute(
            self.q["step_release_dependents"], {"run_ids": [run_id], "nodes": [node]}
        )

    def _start_released(self, conn: Conn, run_id: str, released: list[Any], acc: Advance) -> None:
        """After ``step_release_ready`` / ``step_release_dependents`` released ``released``
        (rows of run, queue, node, type) in run ``run_id``: wake the queues of released
        actions, start the released nodes of other types."""
        for _run, queue, name, node_type in released:
            if node_type == "action":
                acc.wakeups.queues.add(queue)
            else:
                self._start_node(conn, run_id, name, acc)

    def _node_completed(self, conn: Conn, run_id: str, node: str, acc: Advance) -> None:
        """``node`` just completed: release its dependents, or complete the run when
        nothing was released and nothing is left. Both statements go in one round trip
        (:meth:`_send_node_advance`)."""
        with pipelined(conn):
            sent = self._send_node_advance(conn, run_id, node)
        self._node_advanced(conn, run_id, sent, acc)

    def _send_node_advance(self, conn: Conn, run_id: str, node: str) -> tuple[Cursor, Cursor]:
        """Send the advance after ``node`` completed: ``step_release_dependents``, then
        ``run_complete_if_done``; read them with :meth:`_node_advanced`.

        Sending the run's completion without waiting for the release's result is the same
        as "complete the run only when nothing was released": ``run_complete_if_done`` is
        guarded by "no non-terminal step of the run remains", and a step just released is
        ``available`` or ``waiting``, so after a release that released anything it changes
        nothing. Both are guarded, idempotent functions of the run's rows, run under the run
        row lock: sent after a stale (zero-row) completion they change nothing either
        (that transaction is rolled back anyway)."""
        released = self._send_release(conn, run_id, node)
        done = conn.execute(self.q["run_complete_if_done"], {"run_ids": [run_id]})
        return released, done

    def _node_advanced(
        self, conn: Conn, run_id: str, sent: tuple[Cursor, Cursor], acc: Advance
    ) -> None:
        """Read the results of :meth:`_send_node_advance` (after its pipeline) and go on:
        start the released nodes, or finish the completed run."""
        released, done = sent
        self._start_released(conn, run_id, released.fetchall(), acc)
        row = done.fetchone()
        if row is not None:  # never together with a release (see _send_node_advance)
            self._run_completed(conn, run_id, row, acc)

    def _start_node(self, conn: Conn, run_id: str, node: str, acc: Advance) -> None:
        info = conn.execute(
            self.q["step_get_node_info"], {"run_id": run_id, "node": node}
        ).fetchone()
        if info is None:
            return
        node_type, queue, template, over, signal, child_workflow_id, child_schema, later = info
        if node_type == "fan_out":
            self._start_fan_out(conn, run_id, node, queue, over, acc)
        elif node_type == "child":
            self._start_child(
                conn, run_id, node, template, child_workflow_id, child_schema, later, acc
            )
        elif node_type == "wait_signal":
            conn.execute(self.q["step_start_wait"], {"run_id": run_id, "node": node})
            self._consume_signal(conn, run_id, node, signal, acc)

    def _discard_waiting(
        self,
        conn: Conn,
        run_id: str,
        node: str,
        error: str,
        kind: ErrorKind,
        acc: Advance,
        child_run_id: str | None = None,
    ) -> bool:
        """waiting -> discarded, then apply the dependents' policy. False when stale."""
        row = conn.execute(
            self.q["step_discard_if_waiting"],
            {
                "run_id": run_id,
                "node": node,
                "error": error,
                "error_kind": str(kind),
                "child_run_id": child_run_id,
            },
        ).fetchone()
        if row is None:
            return False
        self._engine_discarded(conn, run_id, node, error, str(kind), acc)
        return True

    def _engine_completed(self, conn: Conn, run_id: str, node: str, acc: Advance) -> None:
        """A node the engine completed (not a worker): note the event, advance the run."""
        acc.events.append(("completed", run_id, node, None, None))
        self._node_completed(conn, run_id, node, acc)

    def _engine_discarded(
        self, conn: Conn, run_id: str, node: str, error: str, kind: str, acc: Advance
    ) -> None:
        """A node the engine discarded: note the event, apply the dependents' policy."""
        acc.events.append(("discarded", run_id, node, error, kind))
        self._resolve_discard(conn, run_id, node, error, acc)

    # -- fan-out -------------------------------------------------------------------------

    def _start_fan_out(
        self, conn: Conn, run_id: str, node: str, queue: str, over: JSON, acc: Advance
    ) -> None:
        params: dict[str, Any] = {
            "run_id": run_id,
            "node": node,
            "literal": None,
            "from_node": None,
            "path": [],
        }
        shown = over if isinstance(over, str) else "the literal list"
        try:
            ref = parse_ref(over) if isinstance(over, str) else None
            if ref is not None and ref.kind != "item":
                params["from_node"] = ref.node
                params["path"] = list(ref.path)
            else:
                params["literal"] = _dumps(self._tx_render(conn, run_id, over))
        except TemplateError as exc:
            self._discard_waiting(conn, run_id, node, f"over: {exc}", ErrorKind.INPUT_ERROR, acc)
            return
        row = conn.execute(self.q["step_get_list_shape"], params).fetchone()
        kind, length = (row[0], row[1]) if row else (None, None)
        if kind != "array" or length is None:
            what = (
                "nothing (a key or index on its path is missing)"
                if kind is None
                else f"a JSON {kind}"
            )
            self._discard_waiting(
                conn,
                run_id,
                node,
                f"over: {shown} is {what}, not a list",
                ErrorKind.INPUT_ERROR,
                acc,
            )
            return
        if length > MAX_FAN_OUT_ITEMS:
            self._discard_waiting(
                conn,
                run_id,
                node,
                f"over: {shown} has {length} items, more than MAX_FAN_OUT_ITEMS = "
                f"{MAX_FAN_OUT_ITEMS}",
                ErrorKind.FAN_OUT_TOO_LARGE,
                acc,
            )
            return
        conn.execute(self.q["step_insert_items"], params)
        done, total = conn.execute(
            self.q["step_set_items_total"], {"run_id": run_id, "node": node, "total": length}
        ).fetchone() or (0, 0)
        if done >= total:
            self._finish_fan_out(conn, run_id, node, acc)
            return
        acc.wakeups.queues.add(queue)  # the first items were inserted available
        self._release_items(conn, run_id, node, acc)

    def _release_items(self, conn: Conn, run_id: str, node: str, acc: Advance) -> None:
        rows = conn.execute(
            self.q["step_release_items"], {"run_id": run_id, "node": node}
        ).fetchall()
        acc.wakeups.queues.update(r[0] for r in rows)

    def _finish_fan_out(self, conn: Conn, run_id: str, node: str, acc: Advance) -> None:
        row = conn.execute(
            self.q["step_complete_fan_out"], {"run_id": run_id, "node": node}
        ).fetchone()
        if row is None:
            return
        if row[0] == StepState.COMPLETED:
            self._engine_completed(conn, run_id, node, acc)
        else:
            self._engine_discarded(
                conn, run_id, node, row[1], str(ErrorKind.PAYLOAD_TOO_LARGE), acc
            )

    def _item_completed(
        self, conn: Conn, run_id: str, parent: str, acc: Advance, n: int = 1
    ) -> None:
        """``n`` items of ``parent`` completed: count them and release the next pending
        items (one statement), or complete the fan-out node after its last item."""
        row = conn.execute(
            self.q["step_count_item_done"], {"run_id": run_id, "node": parent, "n": n}
        ).fetchone()
        if row is None:
            return  # the fan-out node is no longer waiting (discarded or cancelled)
        done, total, queue = row
        if done >= total:
            self._finish_fan_out(conn, run_id, parent, acc)
        elif queue is not None:
            acc.wakeups.queues.add(queue)

    def _item_discarded(
        self, conn: Conn, run_id: str, item: str, parent: str, error: str, acc: Advance
    ) -> None:
        """An item of ``parent`` was finally discarded: discard the fan-out node and
        cancel its other items; the node's dependents' policy then applies."""
        message = f"item {item} was discarded: {error}"
        row = conn.execute(
            self.q["step_discard_if_waiting"],
            {
                "run_id": run_id,
                "node": parent,
                "error": message,
                "error_kind": str(ErrorKind.ITEM_FAILED),
                "child_run_id": None,
            },
        ).fetchone()
        if row is None:
            return
        cancelled = conn.execute(
            self.q["step_cancel_items"],
            {"run_id": run_id, "node": parent, "error": f"fan-out node {parent} was discarded"},
        ).fetchall()
        acc.cancelled.extend((run_id, r[0]) for r in cancelled)
        self._engine_discarded(conn, run_id, parent, message, str(ErrorKind.ITEM_FAILED), acc)

    # -- child runs ----------------------------------------------------------------------

    def _start_child(
        self,
        conn: Conn,
        run_id: str,
        node: str,
        template: JSON,
        workflow_id: int | None,
        child_schema: Any,
        not_before: datetime | None,
        acc: Advance,
    ) -> None:
        """Insert the child run of a released child node (its steps not claimable before
        ``not_before``, the start of a delayed parent run) and make the node wait for it.
        The child run has no unique key, sequence or queue override of its own: its
        flow's queues and priorities apply."""
        try:
            if workflow_id is None:
                raise TemplateError("the child flow was not stored with the run")
            child_input = self._tx_render(conn, run_id, template)
            child_input = validate_input(f"child of node {node}", child_schema, child_input)
            text = _dumps(child_input)
        except (TemplateError, InputValidationError, TypeError, ValueError) as exc:
            self._discard_waiting(
                conn, run_id, node, f"child input: {exc}", ErrorKind.INPUT_ERROR, acc
            )
            return
        row = conn.execute(
            self.q["run_insert_child"],
            {
                "workflow_id": workflow_id,
                "input": text,
                "parent_run_id": run_id,
                "node": node,
                "not_before": not_before,
            },
        ).fetchone()
        assert row is not None
        child_id, root_id = str(row[0]), str(row[1])
        conn.execute(
            self.q["step_set_child_run"],
            {"run_id": run_id, "node": node, "child_run_id": child_id},
        )
        conn.execute(self.q["step_start_wait"], {"run_id": run_id, "node": node})
        self._insert_run_steps(conn, child_id, workflow_id, root_id, acc, run_at=not_before)

    def _child_completed(
        self, conn: Conn, run_id: str, node: str, child_run_id: str, acc: Advance
    ) -> None:
        row = conn.execute(
            self.q["step_complete_from_child_if_waiting"],
            {"run_id": run_id, "node": node, "child_run_id": child_run_id},
        ).fetchone()
        if row is None:
            return  # the node stopped waiting for this child (timeout, cancel, retry)
        if row[0] == StepState.COMPLETED:
            self._engine_completed(conn, run_id, node, acc)
        else:
            self._engine_discarded(
                conn, run_id, node, row[1], str(ErrorKind.PAYLOAD_TOO_LARGE), acc
            )

    def _run_ended(
        self,
        conn: Conn,
        run_id: str,
        state: RunState,
        parent: tuple[str, str] | None,
        reason: str,
        acc: Advance,
    ) -> None:
        """``run_id`` just failed or was cancelled (its own steps are cancelled): cancel
        the trees of its child runs, and discard the node of its parent run that waited
        for it (kind ``child_failed``)."""
        acc.finished[run_id] = state
        acc.wakeups.runs_done.add(run_id)
        self._cancel_tree(conn, run_id, False, f"parent run {run_id} {state}", acc)
        if parent is not None:
            self._discard_waiting(
                conn,
                parent[0],
                parent[1],
                f"child run {run_id} {state}: {reason}",
                ErrorKind.CHILD_FAILED,
                acc,
                child_run_id=run_id,
            )

    def _cancel_tree(
        self, conn: Conn, run_id: str, with_self: bool, reason: str, acc: Advance
    ) -> None:
        rows = conn.execute(
            self.q["run_cancel_tree"],
            {"run_id": run_id, "with_self": with_self, "error": reason},
        ).fetchall()
        for r in rows:
            rid = str(r[0])
            acc.finished[rid] = RunState.CANCELLED
            acc.wakeups.runs_done.add(rid)

    # -- run completion and failure ------------------------------------------------------

    def _complete_run_if_done(self, conn: Conn, run_id: str, acc: Advance) -> RunState | None:
        done = conn.execute(self.q["run_complete_if_done"], {"run_ids": [run_id]}).fetchone()
        if done is None:
            return None
        self._run_completed(conn, run_id, done, acc)
        return RunState.COMPLETED

    def _run_completed(self, conn: Conn, run_id: str, done: Any, acc: Advance) -> None:
        """``run_id`` just completed (``done``: the row ``run_complete_if_done`` returned):
        complete the waiting node of its parent run, or release the next run of its
        sequence."""
        acc.finished[run_id] = RunState.COMPLETED
        acc.wakeups.runs_done.add(run_id)
        if done[1] is not None:
            self._child_completed(conn, str(done[1]), done[2], run_id, acc)
        else:
            # Sequences: the next run goes (the key came back with the completion)
            self.release_sequence_after(
                conn, run_id, acc, None if done[3] is None else str(done[3])
            )

    def _resolve_discard(
        self, conn: Conn, run_id: str, node: str, error: str, acc: Advance
    ) -> RunState | None:
        """Apply the dependents' ``on_dep_failure``: fatal (a ``fail_run`` dependent, or a
        leaf) fails the run and cancels its other steps (and its child runs); else only the
        branch is cancelled (Engine Design: Failure Propagation)."""
        downstream = conn.execute(
            self.q["dep_list_downstream"], {"run_id": run_id, "node": node}
        ).fetchall()
        fatal = not downstream or any(r[1] == "fail_run" for r in downstream)
        if fatal:
            message = f"step {node} discarded: {error}"
            failed = conn.execute(
                self.q["run_fail_if_running"],
                {"run_id": run_id, "error": message, "error_kind": "step_discarded"},
            ).fetchone()
            if failed is None:
                return None  # already terminal: a run fails fast only once
            rows = conn.execute(
                self.q["step_cancel_remaining"],
                {"run_id": run_id, "error": f"run failed: step {node} was discarded"},
            ).fetchall()
            acc.cancelled.extend((run_id, r[0]) for r in rows)
            parent = (str(failed[1]), failed[2]) if failed[1] is not None else None
            self._run_ended(conn, run_id, RunState.FAILED, parent, message, acc)
            return RunState.FAILED
        rows = conn.execute(
            self.q["step_cancel_nodes"],
            {
                "run_id": run_id,
                "nodes": [r[0] for r in downstream],
                "error": f"branch cancelled: upstream step {node} was discarded",
            },
        ).fetchall()
        acc.cancelled.extend((run_id, r[0]) for r in rows)
        return self._complete_run_if_done(conn, run_id, acc)

    # -- signals -------------------------------------------------------------------------

    def _consume_signal(
        self, conn: Conn, run_id: str, node: str, name: str | None, acc: Advance
    ) -> bool:
        """Consume the oldest stored signal ``name`` for the waiting ``node`` and complete
        it with the payload; False when none is stored (the node keeps waiting)."""
        if name is None:
            return False
        row = conn.execute(
            self.q["signal_consume"], {"run_id": run_id, "name": name, "node": node}
        ).fetchone()
        if row is None:
            return False
        done = conn.execute(
            self.q["step_complete_if_waiting"], {"run_id": run_id, "node": node, "output": row[0]}
        ).fetchone()
        if done is not None:
            self._engine_completed(conn, run_id, node, acc)
        return True


def _dumps(value: JSON) -> str:
    # the encoding of store.dumps (not imported: store imports this module)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _loads(value: Any) -> JSON:
    return json.loads(value) if isinstance(value, str) else value

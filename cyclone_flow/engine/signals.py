"""Delivering a signal to a run (Client Options: WithMaxSignalWait, WithPayloadLimits); a
wait_signal node consumes it at once or when it starts waiting
(:func:`cyclone_flow.engine.advance.consume_signal`)."""

from __future__ import annotations

from cyclone_flow.db import runs, signals, steps
from cyclone_flow.engine import advance
from cyclone_flow.engine.tx import Tx
from cyclone_flow.errors import RunNotFoundError, RunStateError, SignalRejectedError
from cyclone_flow.text import did_you_mean


def deliver_signal(tx: Tx, run_id: str, name: str, payload_json: str) -> str | None:
    """Keep signal ``name`` with ``payload_json`` for run ``run_id`` and, when a
    wait_signal node of the run waits for it, consume it at once: the node completes with
    the payload and the run advances, under the run lock. Returns the node that consumed
    it (None: kept until a node starts waiting for it); the wakeups and events go to
    ``tx.effects``.

    Raises RunNotFoundError (no such run), RunStateError (the run is finished),
    SignalRejectedError (no node of the run awaits ``name``, or every such node has a
    signal kept already); the caller rolls back then (nothing is written)."""
    state = runs.run_lock(tx, run_id=run_id)
    if state is None:
        raise RunNotFoundError(run_id)
    if state.terminal:
        raise RunStateError(run_id, state, "signals are delivered to running runs only")
    room = signals.signal_count_awaiting(tx, run_id=run_id, name=name)
    if room.awaiting == 0:
        awaited = steps.step_list_signal_names(tx, run_id=run_id)
        raise SignalRejectedError(
            run_id,
            name,
            "no wait_signal node of the run waits for it (any more)" + did_you_mean(name, awaited),
        )
    if room.stored >= room.awaiting:
        raise SignalRejectedError(
            run_id,
            name,
            f"each of the {room.awaiting} node(s) waiting for it has a signal kept already",
        )
    signals.signal_insert(tx, run_id=run_id, name=name, payload=payload_json)
    waiter = steps.step_get_signal_waiter(tx, run_id=run_id, name=name)
    if waiter is not None and advance.consume_signal(tx, run_id, waiter, name):
        return waiter
    return None

"""Fan-out nodes and their item steps, as decisions for :mod:`cyclone_flow.engine.advance`
(which applies them; nothing here calls back up).

A ``fan_out`` node is released ``waiting``; in the same transaction the list ``over`` is
resolved in the database and one item step per element is inserted by one
``INSERT ... SELECT`` over ``jsonb_array_elements``. At most ``max_parallel`` items are
``available`` or ``running`` at once: the rest wait ``pending`` and each item's terminal
transition releases the next in item order. When the last item completes, the node
completes with the item outputs in item order (``jsonb_agg``), bounded by the output limit
of the client that submitted the run; a finally discarded item discards the node (kind
``item_failed``) and cancels its other items. A list longer than
:data:`MAX_FAN_OUT_ITEMS` discards the node (kind ``fan_out_too_large``); an empty list
completes it with ``[]`` at once.
"""

from __future__ import annotations

from typing import Literal

from cyclone_flow._json import JSON, dumps
from cyclone_flow.db import steps
from cyclone_flow.db.rows import DecidedNode
from cyclone_flow.engine.templating import render_template
from cyclone_flow.engine.tx import Discard, Tx
from cyclone_flow.errors import TemplateError
from cyclone_flow.flowfile.template import parse_ref
from cyclone_flow.states import ErrorKind

MAX_FAN_OUT_ITEMS = 100_000
"""Most items one fan-out node may have (Client Options: Limits and Retention,
``cyclone.MaxFanOutItems``). A constant, not an option: every item is a row of
``cyclone_steps`` inserted in the transaction that completes the upstream step, so this
bounds that transaction (100,000 rows take a few seconds). A longer list discards the
node with error_kind ``fan_out_too_large``."""


def start(
    tx: Tx, run_id: str, node: str, queue: str, over: JSON
) -> Discard | Literal["finish", "started"]:
    """Start the released fan-out ``node`` (of ``queue``) over the list ``over``: insert
    its items and release the first ones. Returns a :class:`Discard` (the list is missing,
    not a list, or too long), ``"finish"`` (every item is done already: an empty list, or
    a retried node whose items all completed) or ``"started"``."""
    literal: str | None = None
    from_node: str | None = None
    path: list[str] = []
    shown = over if isinstance(over, str) else "the literal list"
    try:
        ref = parse_ref(over) if isinstance(over, str) else None
        if ref is not None and ref.kind != "item":
            from_node, path = ref.node, list(ref.path)
        else:
            literal = dumps(render_template(tx, run_id, over))
    except TemplateError as exc:
        return Discard(f"over: {exc}", ErrorKind.INPUT_ERROR)
    shape = steps.step_get_list_shape(
        tx, run_id=run_id, node=node, literal=literal, from_node=from_node, path=path
    )
    kind, length = (shape.kind, shape.length) if shape else (None, None)
    if kind != "array" or length is None:
        what = (
            "nothing (a key or index on its path is missing)" if kind is None else f"a JSON {kind}"
        )
        return Discard(f"over: {shown} is {what}, not a list", ErrorKind.INPUT_ERROR)
    if length > MAX_FAN_OUT_ITEMS:
        return Discard(
            f"over: {shown} has {length} items, more than MAX_FAN_OUT_ITEMS = {MAX_FAN_OUT_ITEMS}",
            ErrorKind.FAN_OUT_TOO_LARGE,
        )
    steps.step_insert_items_if_waiting(
        tx, run_id=run_id, node=node, literal=literal, from_node=from_node, path=path
    )
    counts = steps.step_set_items_total_if_waiting(tx, run_id=run_id, node=node, total=length)
    done, total = (counts.items_done, counts.items_total) if counts else (0, 0)
    if done >= total:
        return "finish"
    tx.effects.wakeups.queues.add(queue)  # the first items were inserted available
    release_items(tx, run_id, node)
    return "started"


def release_items(tx: Tx, run_id: str, node: str) -> None:
    """Release the next pending items of ``node`` up to ``max_parallel``."""
    tx.effects.wakeups.queues.update(steps.step_release_items_if_room(tx, run_id=run_id, node=node))


def finish(tx: Tx, run_id: str, node: str) -> DecidedNode | None:
    """Complete the fan-out node with its items' outputs (or discard it: over the output
    limit); None when it no longer waits."""
    return steps.step_complete_fan_out_if_waiting(tx, run_id=run_id, node=node)


def items_completed(tx: Tx, run_id: str, parent: str, n: int = 1) -> bool:
    """``n`` items of ``parent`` completed: count them and release the next pending items
    (one statement). True when that was the last item (finish the node now)."""
    row = steps.step_add_items_done_if_waiting(tx, run_id=run_id, node=parent, n=n)
    if row is None:
        return False  # the fan-out node is no longer waiting (discarded or cancelled)
    if row.items_done >= row.items_total:
        return True
    if row.queue is not None:
        tx.effects.wakeups.queues.add(row.queue)
    return False


def discard_for_item(
    tx: Tx, run_id: str, item: str, parent: str, error: str
) -> tuple[str, str] | None:
    """Item ``item`` of ``parent`` was finally discarded: discard the fan-out node (kind
    ``item_failed``) and cancel its other items. Returns the node's error for the
    dependents' policy and its queue, None when the node no longer waits (stale)."""
    message = f"item {item} was discarded: {error}"
    queue = steps.step_discard_if_waiting(
        tx, run_id=run_id, node=parent, error=message, error_kind=str(ErrorKind.ITEM_FAILED)
    )
    if queue is None:
        return None
    cancelled = steps.step_cancel_items_if_unfinished(
        tx, run_id=run_id, node=parent, error=f"fan-out node {parent} was discarded"
    )
    tx.effects.cancelled.extend((run_id, node) for node in cancelled)
    return message, queue

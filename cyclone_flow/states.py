"""Run and step states. Python values equal the SQL labels (CHECK constraints in migrations).

Step states (Engine Design: The Claiming Algorithm, Leases and Heartbeats, Failure
Propagation) and who moves rows in and out of each:

- ``pending``: written by submit for a node with dependencies (and for a root that is
  not an action, which submit then starts) and for fan-out items beyond
  ``max_parallel`` (each item's terminal transition releases the next); the completion
  transaction of its last dependency moves it to ``available``; a fatal discard moves it
  to ``cancelled``.
- ``available``: written by submit (roots) or by the completion that released it, and by
  the recovery sweep (expired lease) or a failed attempt with attempts left (later
  ``scheduled_at``); the claim moves it to ``running``.
- ``running``: only the claim writes it; completion, failure, the recovery sweep and
  cancellation move it out. Every move out is guarded by ``lease_generation``.
- ``waiting``: a ``fan_out``, ``child`` or ``wait_signal`` node, never claimed. The
  transaction that releases it moves it in (instead of ``available``) and starts it: a
  fan-out inserts its items, a child node its child run, a wait_signal node consumes a
  signal stored earlier. It moves out in the transaction of the event that decides it:
  the last item's completion, the child run's completion or failure, a signal
  (``Client.signal``), the wait scanner after ``wait_until`` (``timeout``), or a fatal
  discard or cancel of the run.
- ``skipped``: a node whose ``when:`` condition was false, or whose dependency was
  skipped (skip-cascade, unless the node has ``on_dep_skip: run``), written instead of
  ``available``/``waiting`` in the transaction that would have released (or, for a
  cascade, the one that skipped the dependency); never claimed or started.
  ``skip_reason`` records the condition as evaluated.
- ``completed``, ``discarded`` (dead letter), ``cancelled``, ``skipped``: terminal;
  ``finished_at`` is set. ``completed`` and ``skipped`` satisfy a dependency.

Run states: ``running`` (from submit) until no non-terminal step remains
(``completed``; skipped steps do not fail it), a fatal discard (``failed``) or an
operator cancel (``cancelled``).

Step events (:class:`EventKind`, the ``kind`` of a ``StepEvent``) name the committed
transition that a client reports after its commit (:mod:`cyclone_flow.events`).
"""

from __future__ import annotations

from enum import StrEnum


class StepState(StrEnum):
    """State of one row of ``cyclone_steps``."""

    PENDING = "pending"
    AVAILABLE = "available"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    DISCARDED = "discarded"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"

    @property
    def terminal(self) -> bool:
        """True for ``completed``, ``discarded``, ``cancelled`` and ``skipped``."""
        return self in _TERMINAL_STEP


class RunState(StrEnum):
    """State of one row of ``cyclone_runs``."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True for every state but ``running``."""
        return self is not RunState.RUNNING


class ErrorKind(StrEnum):
    """``cyclone_steps.error_kind`` / ``cyclone_runs.error_kind`` values (seed names)."""

    HANDLER_ERROR = "handler_error"
    TIMEOUT = "timeout"
    RECLAIM_LIMIT = "reclaim_limit"
    IMPORT_ERROR = "import_error"
    INPUT_ERROR = "input_error"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    DEP_FAILED = "dep_failed"
    CANCELLED = "cancelled"
    STEP_DISCARDED = "step_discarded"
    FAN_OUT_TOO_LARGE = "fan_out_too_large"
    ITEM_FAILED = "item_failed"
    CHILD_FAILED = "child_failed"
    DEADLINE = "deadline"


class EventKind(StrEnum):
    """``StepEvent.kind``: the committed transition a step event reports, and who reports
    it. ``claimed`` (the claim loop), ``completed`` (the completion, or the engine for a
    fan-out, child or wait_signal node), ``retry_scheduled`` (a failed attempt with
    attempts left, from the worker or the recovery sweep), ``discarded`` (a dead letter:
    worker, sweep, wait scanner or engine), ``cancelled`` (a step cancelled by a committed
    transition), ``reclaimed`` (the recovery sweep put an expired lease back) and
    ``skipped`` (the engine skipped a node: its ``when:`` was false, or skip-cascade)."""

    CLAIMED = "claimed"
    COMPLETED = "completed"
    RETRY_SCHEDULED = "retry_scheduled"
    DISCARDED = "discarded"
    CANCELLED = "cancelled"
    RECLAIMED = "reclaimed"
    SKIPPED = "skipped"


_TERMINAL_STEP = frozenset(
    {StepState.COMPLETED, StepState.DISCARDED, StepState.CANCELLED, StepState.SKIPPED}
)


STATE_COLOURS: dict[str, str] = {
    "pending": "#e5e7eb",
    "available": "#bfdbfe",
    "running": "#60a5fa",
    "waiting": "#fde68a",
    "completed": "#86efac",
    "discarded": "#fca5a5",
    "cancelled": "#cbd5e1",
    "skipped": "#f5f5f4",
}
"""The fill colour of each step state, the legend of the dashboard (its ``ui.css``) and of
``graph --run`` (DOT ``fillcolor``, Mermaid ``classDef``)."""

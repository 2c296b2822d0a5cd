"""Run and step states. Python values equal the SQL labels (CHECK constraints in migrations).

Step states (Engine Design: The Claiming Algorithm, Leases and Heartbeats, Failure
Propagation) and who moves rows in and out of each:

- ``pending``: written by submit for a node with dependencies; the completion
  transaction of its last dependency moves it to ``available``; a fatal discard moves it
  to ``cancelled``.
- ``available``: written by submit (roots) or by the completion that released it, and by
  the recovery sweep (expired lease) or a failed attempt with attempts left (later
  ``scheduled_at``); the claim moves it to ``running``.
- ``running``: only the claim writes it; completion, failure, the recovery sweep and
  cancellation move it out. Every move out is guarded by ``lease_generation``.
- ``waiting``: a wait-signal or child node waiting for its event.
- ``completed``, ``discarded`` (dead letter), ``cancelled``: terminal; ``finished_at`` is set.

Run states: ``running`` (from submit) until no non-terminal step remains
(``completed``), a fatal discard (``failed``) or an operator cancel (``cancelled``).
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

    @property
    def terminal(self) -> bool:
        """True for ``completed``, ``discarded`` and ``cancelled``."""
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


_TERMINAL_STEP = frozenset({StepState.COMPLETED, StepState.DISCARDED, StepState.CANCELLED})

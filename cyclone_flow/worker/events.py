"""Post-commit step lifecycle events (Client Options: Observability, WithOnStepEvent)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cyclone_flow.engine.tx import EngineEvent


@dataclass(frozen=True)
class StepEvent:
    """One committed transition. ``kind`` is ``claimed``, ``completed``,
    ``retry_scheduled``, ``discarded``, ``cancelled`` or ``reclaimed``.

    ``queue`` is the step's queue when known; ``duration_s`` the handler's run time in
    seconds (on the events that end an attempt the handler ran); ``wait_s`` the seconds
    the step waited claimable (from ``scheduled_at``) before this claim (on ``claimed``).
    """

    kind: str
    run_id: str
    node: str
    step_id: int | None = None
    attempt: int | None = None
    error: str | None = None
    error_kind: str | None = None
    queue: str | None = None
    duration_s: float | None = None
    wait_s: float | None = None


def call_hook(logger: logging.Logger, hook: Callable[..., Any] | None, *args: Any) -> None:
    """Call a user hook (``on_step_event`` or ``error_handler``); whatever it raises, even
    ``SystemExit``, is logged and never raised, so a hook cannot stop the engine thread
    that calls it (Client Options: Observability). ``KeyboardInterrupt`` still propagates.
    """
    if hook is None:
        return
    try:
        hook(*args)
    except KeyboardInterrupt:
        raise
    except BaseException:
        logger.exception("hook %s raised; ignored", getattr(hook, "__name__", hook))


def emit_engine_events(
    logger: logging.Logger,
    hook: Callable[..., Any] | None,
    events: Iterable[EngineEvent],
) -> None:
    """Send the ``completed`` / ``discarded`` events of nodes the engine decided in a
    committed transaction (fan-out, child and wait_signal nodes)."""
    for e in events:
        event = StepEvent(e.kind, e.run_id, e.node, error=e.error, error_kind=e.error_kind)
        call_hook(logger, hook, event)


def emit_cancelled(
    logger: logging.Logger,
    hook: Callable[..., Any] | None,
    run_id: str,
    nodes: Iterable[str],
) -> None:
    """Send one ``cancelled`` event per node cancelled by a committed transition."""
    for node in nodes:
        call_hook(logger, hook, StepEvent("cancelled", run_id, node, error_kind="cancelled"))

"""Post-commit step lifecycle events (Client Options: Observability, WithOnStepEvent,
WithErrorHandler) and the one reporter that sends them.

Every committed transition of a step is reported after its commit, through
:meth:`Reporter.report`: by the worker (claim, completion, failed attempt), the recovery
sweep, the wait and deadline scanners. Only ``Client.cancel`` and ``Client.signal``
still send their few events themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from cyclone_flow.db.errors import database_lost, prepared_statement_lost, warn_prepared_statements
from cyclone_flow.engine.tx import Effects, EngineEvent
from cyclone_flow.states import EventKind

__all__ = ["EventKind", "Reporter", "StepEvent", "call_hook", "emit_engine_events", "from_engine"]


@dataclass(frozen=True)
class StepEvent:
    """One committed transition. ``kind`` is an :class:`~cyclone_flow.states.EventKind`
    (a ``str``: ``claimed``, ``completed``, ``retry_scheduled``, ``discarded``,
    ``cancelled`` or ``reclaimed``).

    ``queue`` is the step's queue when known; ``duration_s`` the handler's run time in
    seconds (on the events that end an attempt the handler ran); ``wait_s`` the seconds
    the step waited claimable (from ``scheduled_at``) before this claim (on ``claimed``).
    """

    kind: EventKind
    run_id: str
    node: str
    step_id: int | None = None
    attempt: int | None = None
    error: str | None = None
    error_kind: str | None = None
    queue: str | None = None
    duration_s: float | None = None
    wait_s: float | None = None


def from_engine(e: EngineEvent) -> StepEvent:
    """The step event of a node the engine decided (on the node's queue)."""
    return StepEvent(
        e.kind, e.run_id, e.node, error=e.error, error_kind=e.error_kind, queue=e.queue
    )


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
        call_hook(logger, hook, from_engine(e))


def cancelled_in(effects: Effects) -> list[tuple[str, str]]:
    """The ``(run_id, node)`` pairs a transaction cancelled, by run id (each run's nodes in
    the order they were cancelled): what :meth:`Reporter.report` takes."""
    return sorted(effects.cancelled, key=itemgetter(0))


class Reporter:
    """Reports committed transitions to a client's hooks: ``on_step_event(StepEvent)`` and
    ``error_handler(StepEvent, exception)`` (either may be None). A hook's exception is
    logged on ``logger`` and never raised (:func:`call_hook`).

    Also the one place the worker's threads report trouble with the database
    (:meth:`trouble`): ``on_database_error(where)`` is called once per connection-level
    failure (metrics count them)."""

    __slots__ = ("error_handler", "log", "on_database_error", "on_step_event")

    def __init__(
        self,
        logger: logging.Logger,
        on_step_event: Callable[[StepEvent], Any] | None = None,
        error_handler: Callable[[StepEvent, BaseException], Any] | None = None,
        on_database_error: Callable[[str], Any] | None = None,
    ) -> None:
        self.log = logger
        self.on_step_event = on_step_event
        self.error_handler = error_handler
        self.on_database_error = on_database_error

    def trouble(
        self,
        where: str,
        exc: BaseException,
        message: str,
        *args: object,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Log an exception a worker thread caught at ``where`` (``claim``,
        ``heartbeat``, ``completion``, ``maintenance``...) with ``message % args``: when
        the database is out of reach (:func:`~cyclone_flow.db.conn.database_lost`: the
        connection broke, the server restarts), one warning line without traceback
        (recovery is automatic), counted through ``on_database_error(where)``; a prepared
        statement the server does not have (:func:`~cyclone_flow.db.errors.
        prepared_statement_lost`: a misconfigured pooler), an INFO line, and once per
        process the warning that names the fix; any other exception is a bug: an ERROR
        with its traceback."""
        if database_lost(exc):
            text = str(exc).strip().splitlines()
            self.log.warning(
                message + " (database unreachable: %s: %s)",
                *args,
                type(exc).__name__,
                text[0] if text else "",
                extra=extra,
            )
            call_hook(self.log, self.on_database_error, where)
        elif prepared_statement_lost(exc):  # a pooler in transaction mode: not a bug
            warn_prepared_statements(self.log, exc)  # the one warning, naming the fix
            text = str(exc).strip().splitlines()
            self.log.info(
                message + " (%s: %s)",
                *args,
                type(exc).__name__,
                text[0] if text else "",
                extra=extra,
            )
        else:
            self.log.error(message, *args, exc_info=exc, extra=extra)

    def report(
        self,
        event: StepEvent | None = None,
        *,
        cancelled: Iterable[tuple[str, str]] = (),
        engine: Iterable[EngineEvent] = (),
        error: BaseException | None = None,
    ) -> None:
        """Report one committed transaction, in this order: ``event`` (the transition of
        the step that the caller moved), one ``cancelled`` event per ``(run_id, node)`` of
        ``cancelled``, the events of the nodes the engine decided (``engine``), then
        ``error_handler(event, error)`` when ``error`` is given (a failed attempt or an
        expiry; only with ``event``). Call it only after the commit."""
        log, hook = self.log, self.on_step_event
        if event is not None:
            call_hook(log, hook, event)
        for run_id, node in cancelled:
            call_hook(
                log, hook, StepEvent(EventKind.CANCELLED, run_id, node, error_kind="cancelled")
            )
        for e in engine:
            call_hook(log, hook, from_engine(e))
        if error is not None and event is not None:
            call_hook(log, self.error_handler, event, error)

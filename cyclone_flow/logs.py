"""Logging of the engine (Client Options: Observability, WithLogger).

The default logger is ``logging.getLogger("cyclone_flow")`` with a stderr text handler at
INFO; a ``DEBUG`` environment variable (any value but ``""``, ``0``, ``false``, ``no``,
``off``) raises it to DEBUG. That handler steps aside when the application has configured
a handler of its own on the way to the root logger, so no line is printed twice.

Records about one step carry the structured fields ``run_id``, ``node`` and ``attempt``
(through ``extra=``; :func:`step_extra`), which :class:`TextFormatter` appends as
``key=value`` and any JSON formatter can pick up as record attributes.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

LOGGER_NAME = "cyclone_flow"
STEP_FIELDS = ("run_id", "node", "attempt")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def debug_requested() -> bool:
    """True when the ``DEBUG`` environment variable asks for debug logging."""
    value = os.environ.get("DEBUG", "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


EVENT_FIELD = "step_event"
"""The record attribute naming what a worker's record reports, when it reports a step
event a run's progress display shows too: ``attempt_failed`` (an attempt failed) or
``run_ended`` (its step ended the run). ``cyclone-flow run`` leaves these records out while
it shows its run's progress, which tells them (each failure once)."""


def step_extra(
    run_id: str, node: str, attempt: int | None = None, event: str | None = None
) -> dict[str, Any]:
    """The structured fields of a record about one step, for ``extra=`` (``event``: the
    :data:`EVENT_FIELD` of a record that reports a step event, else left out)."""
    fields: dict[str, Any] = {"run_id": run_id, "node": node, "attempt": attempt}
    if event is not None:
        fields[EVENT_FIELD] = event
    return fields


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT`` plus `` run_id=... node=... attempt=...`` for the fields a record
    carries."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = [
            f"{name}={getattr(record, name)}"
            for name in STEP_FIELDS
            if getattr(record, name, None) is not None
        ]
        if not fields:
            return text
        head, sep, tail = text.partition("\n")  # keep a traceback below the fields
        return f"{head} {' '.join(fields)}{sep}{tail}"


class DefaultHandler(logging.Handler):
    """Writes to the current ``sys.stderr`` unless another handler will get the record
    (one on the logger's way to the root, as ``logging.basicConfig`` installs)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(TextFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        if has_other_handler(logging.getLogger(record.name), self):
            return
        try:
            # past the step-log proxy (cyclone_flow.worker.step_logs): a handler's record is
            # captured as a record, not again as a line of its stderr
            stream = getattr(sys.stderr, "uncaptured", sys.stderr)
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


def has_other_handler(logger: logging.Logger, me: logging.Handler) -> bool:
    """Whether a handler other than ``me`` gets ``logger``'s records on the way to the
    root (the step-log capture handler, ``captures_only``, does not count: it prints
    nothing)."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(h is not me and not getattr(h, "captures_only", False) for h in current.handlers):
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def default_logger() -> logging.Logger:
    """The ``cyclone_flow`` logger with the default stderr handler attached (once) and,
    unless the application set a level on it, the level INFO (DEBUG with ``DEBUG`` set)."""
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(h, DefaultHandler) for h in logger.handlers):
        logger.addHandler(DefaultHandler())
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.DEBUG if debug_requested() else logging.INFO)
    return logger

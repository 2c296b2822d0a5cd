"""A step this worker cannot import, or may not run, goes back to the queue instead of
failing (issue 30.2, docs/failures.md).

A handler module missing on this host, a syntax error saved under ``worker --reload``, an
old worker of a rolling deploy that lacks a new function, or a call outside this worker's
``--allow-module`` is a fault of this worker, not of the run: the step is given back
(``step_give_back_if_leased``: no attempt charged, claimable again a little later, the
reason recorded on the step for ``status`` and the dashboard) and this worker leaves that
call alone for a while (:class:`CallBackoff`: the claim skips it). Only when the node's
``import_wait`` has passed since the first give-back is the step discarded with
``import_error``, so nothing waits for ever.
"""

from __future__ import annotations

import threading
import time

from cyclone_flow.errors import HandlerImportError

__all__ = ["GIVE_BACK_DELAY_S", "CallBackoff", "GiveBack", "gives_back", "reason_text"]

GIVE_BACK_DELAY_S = 1.0
"""Seconds a given-back step waits before any worker may claim it again."""

_FIRST_SKIP_S = 1.0
_MAX_SKIP_S = 30.0
"""This worker skips a call it gave back for 1 s, then 2, 4, ... up to 30 s while it keeps
failing to import (each window ends with one more try)."""

_GIVE_BACK_REASONS = frozenset({"import", "module", "attribute"})
"""The :class:`HandlerImportError` reasons that are the worker's, not the flow's: the
module does not import here, is not allowed here, or lacks the name here (older code).
A malformed call, a private part, a foreign or async handler or a wrong signature fail
the step at once: no worker can run them."""


def gives_back(exc: HandlerImportError) -> bool:
    """Whether a failed resolution is given back (True) or fails the step (False)."""
    return exc.reason in _GIVE_BACK_REASONS


def reason_text(client_id: str, call: str, exc: HandlerImportError) -> str:
    """The account stored on the step: ``no live worker can import shop.handlers:charge:
    worker w1: cannot import module ...`` (``may run`` for a call outside the worker's
    ``--allow-module``)."""
    verb = "may run" if exc.reason == "module" else "can import"
    return f"no live worker {verb} {call}: worker {client_id}: {exc}"


class GiveBack(Exception):
    """Internal: give the step back with ``reason`` (:func:`reason_text`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CallBackoff:
    """The calls this worker gave back, each skipped (not claimed, given back at once
    when a claim that cannot filter them took one) until its window ends; thread-safe
    (the reads of every step and claim take no lock while no call failed here)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # call -> (monotonic end of its skip window, window length, the reason)
        self._calls: dict[str, tuple[float, float, str]] = {}
        self._now = time.monotonic

    def note(self, call: str, reason: str) -> float:
        """``call`` failed to import (again): skip it for the next window (doubled since
        the last one); the window's length in seconds."""
        with self._lock:
            last = self._calls.get(call)
            window = _FIRST_SKIP_S if last is None else min(last[1] * 2, _MAX_SKIP_S)
            self._calls[call] = (self._now() + window, window, reason)
        return window

    def skipped(self, call: str) -> str | None:
        """The reason ``call`` is skipped now, or None (not skipped, or its window ended:
        try to import it again)."""
        if not self._calls:  # the usual case, every step: no lock
            return None
        with self._lock:
            entry = self._calls.get(call)
        return entry[2] if entry is not None and entry[0] > self._now() else None

    def failed_before(self, call: str) -> bool:
        """Whether ``call`` failed to import on this worker and has not imported since."""
        if not self._calls:
            return False
        with self._lock:
            return call in self._calls

    def imported(self, call: str) -> None:
        """``call`` imported: forget it."""
        if not self._calls:
            return
        with self._lock:
            self._calls.pop(call, None)

    def failed(self) -> dict[str, str]:
        """Every call that failed to import here and has not imported since (skipped now
        or not) -> the reason of its last failure."""
        with self._lock:
            return {call: reason for call, (_, _, reason) in self._calls.items()}

    def calls(self) -> list[str]:
        """The calls skipped now (what the claim leaves to other workers), sorted."""
        if not self._calls:  # every claim: no lock, no clock read
            return []
        now = self._now()
        with self._lock:
            return sorted(c for c, (end, _, _) in self._calls.items() if end > now)

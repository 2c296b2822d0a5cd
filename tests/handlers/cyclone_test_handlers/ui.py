"""Handlers of the dashboard's tests: a gate a test opens, failures it switches off, and
outputs or errors carrying markup (the XSS tests)."""

from __future__ import annotations

import threading
from typing import Any

GATE = threading.Event()
"""``gated`` waits for it (at most 30 s)."""
FAIL = {"on": True}
"""``fails_while_on`` raises while ``FAIL["on"]``."""

FAILING = """
name: failing
nodes:
  a:
    call: cyclone_test_handlers.ui:fails_while_on
  b:
    call: cyclone_test_handlers.basic:echo
    needs: [a]
"""
"""A flow whose first node fails while :data:`FAIL` is on."""

WAITS = """
name: waits
nodes:
  approve:
    type: wait_signal
    signal: go
  after:
    call: cyclone_test_handlers.basic:echo
    needs: [approve]
"""
"""A flow waiting for the signal ``go``."""


def gated(ctx: Any, input: Any) -> Any:
    """Wait until the test sets :data:`GATE`; return the input."""
    GATE.wait(30)
    return input


def fails_while_on(ctx: Any, input: Any) -> Any:
    """Raise while :data:`FAIL` is on, else return ``{"ok": True}``."""
    if FAIL["on"]:
        raise RuntimeError("failing on purpose while FAIL is on")
    return {"ok": True}


def markup_output(ctx: Any, input: Any) -> Any:
    """Return the input's ``markup`` as the output (and under a key)."""
    return {"html": input["markup"], input["markup"]: 1}


def markup_error(ctx: Any, input: Any) -> Any:
    """Raise with the input's ``markup`` as the message."""
    raise ValueError(input["markup"])

"""Handlers that log and print, for the step-log tests: each writes to stdout and stderr,
logs through ``logging`` and ``ctx.log``, and ``chatty`` fails its first attempt."""

from __future__ import annotations

import logging
import sys
from typing import Any

from cyclone_test_handlers.engine import event

log = logging.getLogger("chatty")


def chatty(ctx: Any, input: Any) -> Any:
    """Print, log (a warning record, ``ctx.log`` at info, an exception with its traceback),
    then fail attempt 1 with ``ValueError``; later attempts return ``{"ok": attempt}``."""
    print(f"hello from print, attempt {ctx.attempt}")
    print("partial ", end="")
    print("line", file=sys.stderr)
    log.warning("a warning record")
    ctx.log.info("ctx.log says %s", "hi")
    try:
        raise KeyError("caught")
    except KeyError:
        log.exception("logged with its traceback")
    if ctx.attempt == 1:
        raise ValueError("first attempt fails")
    return {"ok": ctx.attempt}


def loud(ctx: Any, input: Any) -> Any:
    """Print ``input["lines"]`` lines of 100 characters (with ``input["key"]``: once the
    test sets the event ``(key, "go")``, waiting up to 20 s)."""
    if "key" in input and not event(input["key"], "go").wait(20):
        raise RuntimeError("never released")
    for i in range(int(input["lines"])):
        print(f"{i:04d}" + "x" * 96)
    return None

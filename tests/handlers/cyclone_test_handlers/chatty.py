"""Handlers that log and print, for the step-log tests: each writes to stdout and stderr,
logs through ``logging`` and ``ctx.log``, and ``chatty`` fails its first attempt."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path
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


def log_then_wait(ctx: Any, input: Any) -> Any:
    """Print ``input["line"]`` and log it through ``ctx.log``, print ``input.get("many",
    0)`` numbered lines more, then wait until the file ``input["release"]`` exists (up to
    60 s): a step that is still running with lines written."""
    print(input["line"])
    ctx.log.info("logged: %s", input["line"])
    for i in range(int(input.get("many", 0))):
        print(f"line {i}")
    release = Path(input["release"])
    deadline = time.monotonic() + 60
    while not release.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("never released")
        time.sleep(0.02)
    return None


def child_output(ctx: Any, input: Any) -> Any:
    """Write past ``sys.stdout``: a child process's ``echo hello`` and ``os.write(1, ...)``
    / ``os.write(2, ...)``."""
    subprocess.run(["echo", "hello"], check=True)
    os.write(1, b"x\n")
    os.write(2, b"to fd 2\n")
    return {"ok": True}

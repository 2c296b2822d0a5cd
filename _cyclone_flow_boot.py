"""The ``cyclone-flow`` console script's entry point, kept outside the ``cyclone_flow``
package so that it runs before the package's imports (most of a second): for
``cyclone-flow worker`` and ``cyclone-flow ui`` it catches SIGTERM and SIGINT from the
first instant, so a worker or a dashboard stopped while it is still starting exits 0
like any other graceful stop instead of dying with the default action (143), a
``KeyboardInterrupt`` traceback or click's "Aborted!". Each command installs its own
handler first thing and honours a signal caught here (:data:`EARLY_SIGNALS`)."""

from __future__ import annotations

import signal
import sys
from types import FrameType

EARLY_SIGNALS: list[int] = []
"""Signals received before the worker or ui command installed its own handler."""


def _remember(signum: int, _frame: FrameType | None) -> None:
    EARLY_SIGNALS.append(signum)


def main() -> None:
    """Run the ``cyclone-flow`` command line (:func:`cyclone_flow.cli.main`)."""
    if sys.argv[1:2] in (["worker"], ["ui"]):
        signal.signal(signal.SIGTERM, _remember)
        signal.signal(signal.SIGINT, _remember)
    from cyclone_flow.cli import main as cli_main

    cli_main()

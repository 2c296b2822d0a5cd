"""The worker's name for :mod:`cyclone_flow.handlers` (handler resolution under the
allow-list), which moved below the flow-file pipeline so that ``flowfile.lint`` can check
imports without importing the worker."""

from __future__ import annotations

from cyclone_flow.handlers import (
    AllowList,
    Handler,
    HandlerImportError,
    HandlerResolver,
    split_call,
)

__all__ = ["AllowList", "Handler", "HandlerImportError", "HandlerResolver", "split_call"]

"""Small handlers for engine tests."""

from __future__ import annotations

from os.path import join as path_join  # noqa: F401  (a function of another package)
from typing import Any

from cyclone_test_handlers._impl import reexported  # noqa: F401  (a re-export)


def echo(ctx: Any, input: Any) -> Any:
    """Return the input unchanged."""
    return input


def add(ctx: Any, input: Any) -> Any:
    """``{"a": x, "b": y}`` -> ``{"sum": x + y}``."""
    return {"sum": input["a"] + input["b"]}


def boom(ctx: Any, input: Any) -> Any:
    """Always raises."""
    raise RuntimeError("boom")

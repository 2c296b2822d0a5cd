"""Small handlers for engine tests."""

from __future__ import annotations

from typing import Any


def echo(ctx: Any, input: Any) -> Any:
    """Return the input unchanged."""
    return input


def add(ctx: Any, input: Any) -> Any:
    """``{"a": x, "b": y}`` -> ``{"sum": x + y}``."""
    return {"sum": input["a"] + input["b"]}


def boom(ctx: Any, input: Any) -> Any:
    """Always raises."""
    raise RuntimeError("boom")

"""The smallest example (``examples/flows/hello.yaml``): no database writes, no data files."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cyclone_flow import Context

DEFAULT_NAME = "world"


def greeting(name: Any) -> str:
    """``"Hello, <name>!"``; ``name`` must be a non-empty string of at most 100 characters."""
    if name is None:
        name = DEFAULT_NAME
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        raise ValueError(f"name must be a non-empty string of at most 100 characters: {name!r}")
    return f"Hello, {name.strip()}!"


def greet(ctx: Context, input: Any) -> dict[str, Any]:
    """Input: the run input, ``{"name": "Ada"}`` (``name`` or the whole input may be missing:
    ``"world"``). Output ``{"greeting": "Hello, Ada!"}``."""
    name = input.get("name") if isinstance(input, dict) else input
    return {"greeting": greeting(name)}


def shout(ctx: Context, input: Any) -> dict[str, Any]:
    """Input ``{"text": "Hello, Ada!"}``.

    Output ``{"message": "HELLO, ADA!", "run_id": ctx.run_id, "attempt": ctx.attempt}``.
    """
    text = input.get("text") if isinstance(input, dict) else None
    if not isinstance(text, str):
        raise ValueError(f"input must be an object with a string 'text', got {input!r}")
    return {"message": text.upper(), "run_id": ctx.run_id, "attempt": ctx.attempt}

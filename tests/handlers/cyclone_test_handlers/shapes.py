"""Handlers of every shape: an ``async def`` handler, a ``def`` wrapper that
returns a coroutine, an async callable object (all three run), an async
generator and handlers with a wrong signature (refused)."""

from __future__ import annotations

import asyncio
from typing import Any


async def async_handler(ctx: Any, input: Any) -> Any:
    """An ``async def`` handler: runs on the worker's event loop."""
    await asyncio.sleep(0)
    return {"ran": True}


def returns_coroutine(ctx: Any, input: Any) -> Any:
    """A ``def`` that returns a coroutine without awaiting it."""
    return async_handler(ctx, input)


class AsyncCallable:
    """An instance whose ``__call__`` is ``async def``."""

    async def __call__(self, ctx: Any, input: Any) -> Any:
        return {"ran": True}


async_callable = AsyncCallable()


async def async_generator(ctx: Any, input: Any) -> Any:
    """An async generator function: it yields, never returns an output (refused)."""
    yield {"ran": True}


def one_parameter(ctx: Any) -> Any:
    """Takes only ``ctx``."""
    return {"ran": True}


def three_required(ctx: Any, input: Any, extra: Any) -> Any:
    """A third parameter without a default."""
    return {"ran": True}


def with_defaults(ctx: Any, input: Any, extra: Any = 1, *args: Any, **kwargs: Any) -> Any:
    """A valid signature: extra parameters with defaults and varargs."""
    return {"ran": True, "input": input}

"""A handler defined here and re-exported by :mod:`cyclone_test_handlers.basic`."""

from __future__ import annotations

from typing import Any


def reexported(ctx: Any, input: Any) -> Any:
    """Returns ``{"reexported": True}``."""
    return {"reexported": True}

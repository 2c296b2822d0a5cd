"""Deprecated module paths: the ``__getattr__`` a module that moved keeps at its old path
for one release (PEP 562), so ``from old.path import name`` still works and warns."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["moved_to"]


def moved_to(old: str, new: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the old path ``old`` of module ``new`` (dotted names):
    reading a public name warns (DeprecationWarning naming both paths) and gives ``new``'s;
    dunder names raise AttributeError, so tools probing the module see none of them. ``new``
    is imported on first use, not when the old module is."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        warnings.warn(f"{old} is deprecated: import from {new}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    return __getattr__

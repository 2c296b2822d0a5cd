"""Deprecated: moved to :mod:`cyclone_flow.flowfile.diagram` (``to_mermaid``, ``to_dot``).
Importing a name from here warns and gives the one of the new module; this alias goes
after one release."""

from __future__ import annotations

import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    from cyclone_flow.flowfile import diagram

    if name.startswith("__"):
        raise AttributeError(name)
    warnings.warn(
        "cyclone_flow.flowfile.graph is deprecated: import from cyclone_flow.flowfile.diagram",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(diagram, name)

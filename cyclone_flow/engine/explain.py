"""Deprecated: moved to :mod:`cyclone_flow.explain` (it imports no engine module and makes
no transition). Importing a name from here warns and gives the one of the new module; this
alias goes after one release."""

from __future__ import annotations

import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    from cyclone_flow import explain

    if name.startswith("__"):
        raise AttributeError(name)
    warnings.warn(
        "cyclone_flow.engine.explain is deprecated: import from cyclone_flow.explain",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(explain, name)

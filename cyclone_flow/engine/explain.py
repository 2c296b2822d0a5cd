"""Deprecated: moved to :mod:`cyclone_flow.explain` (it imports no engine module and makes
no transition). Importing a name from here warns and gives the one of the new module; this
alias goes after one release."""

from __future__ import annotations

from cyclone_flow.moved import moved_to

__getattr__ = moved_to("cyclone_flow.engine.explain", "cyclone_flow.explain")

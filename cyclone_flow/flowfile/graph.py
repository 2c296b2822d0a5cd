"""Deprecated: moved to :mod:`cyclone_flow.flowfile.diagram` (``to_mermaid``, ``to_dot``).
Importing a name from here warns and gives the one of the new module; this alias goes
after one release."""

from __future__ import annotations

from cyclone_flow.moved import moved_to

__getattr__ = moved_to("cyclone_flow.flowfile.graph", "cyclone_flow.flowfile.diagram")

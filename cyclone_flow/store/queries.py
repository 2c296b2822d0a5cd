"""The named SQL statements, now loaded from ``cyclone_flow/db/sql`` (one file per table):
see :mod:`cyclone_flow.db.queries`."""

from __future__ import annotations

from cyclone_flow.db.queries import parse_into, qualify, render, statements

__all__ = ["parse_into", "qualify", "render", "statements"]

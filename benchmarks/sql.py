"""The benchmark suite's named SQL (``benchmarks/sql/bench.sql``), loaded with the engine's
own loader (:mod:`cyclone_flow.db.queries`)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from cyclone_flow.db.queries import parse_into, qualify

_FILE = Path(__file__).resolve().parent / "sql" / "bench.sql"


@cache
def statements() -> dict[str, str]:
    """name -> SQL text with ``{schema}`` placeholders (purpose comments dropped)."""
    out: dict[str, str] = {}
    parse_into(out, _FILE.read_text("utf-8"), _FILE.name)
    return out


@cache
def qualified(schema: str) -> dict[str, str]:
    """Every statement with ``{schema}`` replaced by the quoted ``schema``."""
    return qualify(statements(), schema)

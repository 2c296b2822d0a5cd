"""The benchmark suite's named SQL (``benchmarks/sql/bench.sql``), loaded like the engine's:
``-- name: x`` headers, ``{schema}`` filled through :class:`psycopg.sql.Identifier`."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from psycopg import sql

_HEADER = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)
_FILE = Path(__file__).resolve().parent / "sql" / "bench.sql"


@cache
def statements() -> dict[str, str]:
    """name -> SQL text with ``{schema}`` placeholders (purpose comments dropped)."""
    parts = _HEADER.split(_FILE.read_text("utf-8"))
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = body.strip().splitlines()
        while lines and lines[0].startswith("--"):
            lines.pop(0)
        out[name] = "\n".join(lines)
    return out


@cache
def render(schema: str) -> dict[str, str]:
    """Every statement with ``{schema}`` replaced by the quoted ``schema``."""
    ident = sql.Identifier(schema)
    return {
        name: sql.SQL(body).format(schema=ident).as_string(None)
        for name, body in statements().items()
    }

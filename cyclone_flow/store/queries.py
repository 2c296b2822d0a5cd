"""Load the named SQL statements of ``store/sql/*.sql`` once.

Each statement stands under a ``-- name: <entity>_<transition>`` header followed by comment
lines that give its purpose. Table names are written ``{schema}.cyclone_x``; :func:`render`
fills ``{schema}`` through :class:`psycopg.sql.Identifier` (never string formatting), so a
literal brace in a statement is written ``{{`` / ``}}``.
"""

from __future__ import annotations

import importlib.resources
import re
from functools import cache

from psycopg import sql

_HEADER = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)


def parse_into(out: dict[str, str], text: str, source: str) -> None:
    """Add the named statements of one ``.sql`` file's ``text`` to ``out`` (purpose comments
    dropped). Raises RuntimeError for a name already in ``out``."""
    parts = _HEADER.split(text)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in out:
            raise RuntimeError(f"duplicate SQL statement name {name!r} in {source}")
        lines = body.strip().splitlines()
        while lines and lines[0].startswith("--"):
            lines.pop(0)  # the purpose comment stays in the file, not on the wire
        out[name] = "\n".join(lines)


def qualify(statements: dict[str, str], schema: str) -> dict[str, str]:
    """``statements`` with their tables qualified by ``schema`` (a validated identifier)."""
    ident = sql.Identifier(schema)
    return {
        name: sql.SQL(body).format(schema=ident).as_string(None)
        for name, body in statements.items()
    }


@cache
def statements() -> dict[str, str]:
    """Every named statement, unrendered: name -> SQL text with ``{schema}`` placeholders."""
    out: dict[str, str] = {}
    folder = importlib.resources.files("cyclone_flow.store") / "sql"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            parse_into(out, entry.read_text("utf-8"), entry.name)
    return out


@cache
def render(schema: str) -> dict[str, str]:
    """Every statement with its tables qualified by ``schema`` (a validated identifier)."""
    return qualify(statements(), schema)

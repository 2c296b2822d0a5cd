"""Load the named SQL statements of ``db/sql/*.sql`` once.

One file per table (``runs.sql``, ``steps.sql``, ...; ``notify.sql`` and ``session.sql``
for what touches no table); each file opens with a header naming its table and the
migrations that define it.
Each statement stands under a ``-- name: <table>_<verb>[_<object>][_if_<guard>][_many]``
header (the table is the one the statement writes, or mainly reads), followed by comment
lines that give its purpose. Table names are written ``{schema}.cyclone_x``;
:func:`qualified` fills ``{schema}`` through :class:`psycopg.sql.Identifier` (never string
formatting), so a literal brace in a statement is written ``{{`` / ``}}`` and a literal
``%`` is written ``%%``.
"""

from __future__ import annotations

import importlib.resources
import re
from functools import cache

from psycopg import sql

_HEADER = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)

PREFIXES: dict[str, tuple[str, ...]] = {
    "runs.sql": ("run_",),
    "steps.sql": ("step_",),
    "deps.sql": ("dep_",),
    "workflows.sql": ("workflow_",),
    "signals.sql": ("signal_",),
    "schedules.sql": ("schedule_",),
    "flow_revisions.sql": ("flow_", "revision_"),
    "sequences.sql": ("sequence_",),
    "workers.sql": ("worker_",),
    "step_logs.sql": ("step_log_",),
    "rate_windows.sql": ("rate_window_",),
    "notify.sql": ("notify_",),
    "session.sql": ("pg_", "session_"),
    "health.sql": ("health_",),
}
"""The name prefixes each file may hold (tests/unit/test_db_queries.py checks them)."""


def parse_into(out: dict[str, str], text: str, source: str) -> None:
    """Add the named statements of one ``.sql`` file's ``text`` to ``out`` (purpose comments
    dropped). Raises ValueError for a name already in ``out``."""
    parts = _HEADER.split(text)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in out:
            raise ValueError(f"duplicate SQL statement name {name!r} in {source}")
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
def by_file() -> dict[str, dict[str, str]]:
    """Every named statement, unqualified, per file: file name -> name -> SQL text."""
    out: dict[str, dict[str, str]] = {}
    seen: set[str] = set()
    folder = importlib.resources.files("cyclone_flow.db") / "sql"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            found: dict[str, str] = {}
            parse_into(found, entry.read_text("utf-8"), entry.name)
            twice = seen & set(found)
            if twice:
                raise ValueError(f"duplicate SQL statement name {min(twice)!r} in {entry.name}")
            seen |= set(found)
            out[entry.name] = found
    return out


@cache
def statements() -> dict[str, str]:
    """Every named statement, unqualified: name -> SQL text with ``{schema}`` placeholders."""
    return {name: body for found in by_file().values() for name, body in found.items()}


@cache
def qualified(schema: str) -> dict[str, str]:
    """Every statement with its tables qualified by ``schema`` (a validated identifier)."""
    return qualify(statements(), schema)

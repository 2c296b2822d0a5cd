"""Helpers shared by the example handlers: data files by name, idempotent table creation."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, LiteralString

if TYPE_CHECKING:
    import psycopg

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
"""``examples/data``: the only folder the example handlers read files from."""


def data_file(name: Any) -> Path:
    """Path of the data file ``name`` inside :data:`DATA_DIR`.

    ``name`` must be a bare file name: absolute paths, path separators, ``.``/``..`` and
    hidden files are rejected with a ``ValueError`` naming the problem. A name that passes but
    does not exist raises ``FileNotFoundError`` listing the available files.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"data file name must be a non-empty string, got {name!r}")
    if "\x00" in name:
        raise ValueError(f"data file name must not contain NUL bytes: {name!r}")
    drive = len(name) > 1 and name[0].isalpha() and name[1] == ":"
    if Path(name).is_absolute() or name.startswith(("/", "\\")) or drive:
        raise ValueError(f"data file name must not be an absolute path: {name!r}")
    if "/" in name or "\\" in name:
        raise ValueError(f"data file name must not contain path separators: {name!r}")
    if name in (".", "..") or name.startswith("."):
        raise ValueError(f"data file name must not be '.', '..' or a hidden file: {name!r}")
    path = DATA_DIR / name
    if path.resolve().parent != DATA_DIR:
        raise ValueError(f"data file name escapes the data folder: {name!r}")
    if not path.is_file():
        available = ", ".join(sorted(p.name for p in DATA_DIR.glob("*.csv")))
        raise FileNotFoundError(f"no data file {name!r} in {DATA_DIR} (available: {available})")
    return path


def file_name(input: Any, default: str) -> str:
    """The ``file`` of a handler input (a mapping or ``None``), or ``default`` if absent/null."""
    if input is None:
        return default
    if not isinstance(input, dict):
        raise ValueError(f"input must be an object like {{'file': {default!r}}}, got {input!r}")
    name = input.get("file")
    return default if name is None else name


def number(text: str, column: str, line: int) -> float:
    """Parse a finite float from a CSV cell; ``ValueError`` names the line and column."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"line {line}: {column} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"line {line}: {column} is not finite: {text!r}")
    return value


def ensure_table(conn: psycopg.Connection[Any], table: str, ddl: LiteralString) -> None:
    """Run ``ddl`` (a ``CREATE TABLE IF NOT EXISTS``) on ``conn``, serialised across sessions.

    Two transactions running ``CREATE TABLE IF NOT EXISTS`` for the same table at once can
    fail with a unique violation on the catalog; a transaction-scoped advisory lock keyed on
    the table name makes concurrent creators (e.g. two runs of the same flow) wait for each
    other instead. The lock is released when the completion transaction ends.
    """
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"cyclone_examples:{table}",))
    conn.execute(ddl)


def require(input: Any, key: str) -> Any:
    """``input[key]`` of a mapping input; ``ValueError`` naming the key otherwise."""
    if not isinstance(input, dict) or key not in input:
        raise ValueError(
            f"input must be an object with a {key!r} field, got {type(input).__name__}"
        )
    return input[key]

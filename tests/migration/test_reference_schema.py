"""The schema that every shipped migration builds, compared with the committed reference
``reference_schema.txt`` (a catalog description, see ``helpers.catalog``; stable across
Postgres versions where ``pg_dump`` output is not), and the shipped migration files with
the checksums recorded there: a shipped migration never changes (deployed schemas would
not get the change), a new one adds to the reference.

Regenerate the reference after adding a migration::

    CYCLONE_UPDATE_REFERENCE_SCHEMA=1 .venv/bin/pytest tests/migration/test_reference_schema.py
"""

from __future__ import annotations

import difflib
import hashlib
import os
from pathlib import Path

import psycopg
import pytest
from helpers.catalog import describe_schema, render

from cyclone_flow.db.migrate import migrations

REFERENCE = Path(__file__).with_name("reference_schema.txt")
UPDATE_ENV = "CYCLONE_UPDATE_REFERENCE_SCHEMA"
REGENERATE = f"{UPDATE_ENV}=1 .venv/bin/pytest tests/migration/test_reference_schema.py"
HEADER = (
    "# The schema built by every shipped migration (tests/migration/test_reference_schema.py).\n"
    f"# Generated; after adding a migration regenerate with:\n#   {REGENERATE}\n"
)


def _checksums() -> str:
    lines = []
    for mig in migrations():
        text = mig.sql.replace("\r\n", "\n").encode("utf-8")
        digest = hashlib.sha256(text).hexdigest()
        lines.append(f"file {mig.version:04d}_{mig.name}.sql: sha256 {digest}\n")
    return "".join(lines)


def _sections(text: str) -> tuple[str, str]:
    """(file checksums, schema description) of a reference text, comments left out."""
    lines = [line for line in text.splitlines(keepends=True) if not line.startswith("#")]
    files = "".join(line for line in lines if line.startswith("file "))
    return files, "".join(line for line in lines if not line.startswith("file "))


def _diff(what: str, expected: str, actual: str) -> str:
    """A unified diff of ``what`` (empty when equal)."""
    return "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            fromfile=f"{REFERENCE.name} ({what})",
            tofile=f"{what} now",
        )
    )


def test_migrated_schema_and_shipped_migrations_match_the_reference(
    database_url: str, schema: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        description = render(describe_schema(conn, schema))
    checksums = _checksums()
    if os.environ.get(UPDATE_ENV):
        REFERENCE.write_text(HEADER + checksums + description, encoding="utf-8")
    assert REFERENCE.exists(), f"no {REFERENCE.name}: generate it with {REGENERATE}"
    files, described = _sections(REFERENCE.read_text(encoding="utf-8"))
    diffs = _diff("shipped migration files", files, checksums) + _diff(
        "migrated schema", described, description
    )
    if diffs:
        pytest.fail(
            f"the migrations differ from tests/migration/{REFERENCE.name}:\n{diffs}\n"
            "A shipped migration must not change: add a new one. After adding one, "
            f"regenerate the reference: {REGENERATE}",
            pytrace=False,
        )

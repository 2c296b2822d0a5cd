"""The named statements of ``cyclone_flow/db/sql``: one file per table, each statement's name
prefixed by its file's table, and each run by exactly one typed function of the module of
that table, named as the statement (``send_<name>`` for the form sent in a pipeline)."""

from __future__ import annotations

import ast
import importlib.resources
import re
from pathlib import Path

from cyclone_flow.db import queries

DB = Path(str(importlib.resources.files("cyclone_flow.db")))
NAME_RE = re.compile(r"^[a-z]+(_[a-z]+)+$")


def test_every_statement_is_prefixed_by_its_files_table() -> None:
    found = queries.by_file()
    assert set(found) == set(queries.PREFIXES), "a .sql file without a table prefix rule"
    for file, statements in found.items():
        for name in statements:
            assert NAME_RE.fullmatch(name), name
            assert name.startswith(queries.PREFIXES[file]), f"{name} in {file}"
    assert len(queries.statements()) == sum(len(s) for s in found.values())


def test_each_file_opens_with_its_table_and_migrations() -> None:
    for file in queries.PREFIXES:
        head = (DB / "sql" / file).read_text("utf-8").splitlines()[0]
        if file in ("notify.sql", "session.sql", "health.sql"):
            assert head.startswith("-- No table")
        else:
            assert head.startswith(f"-- Table cyclone_{file.removesuffix('.sql')}:"), head
            text = (DB / "sql" / file).read_text("utf-8").split("-- name:")[0]
            assert re.search(r"\bmigrations?\b", text), file
            assert re.search(r"\b\d{4}_[a-z_]+", text), file  # e.g. 0001_initial


def test_each_statement_has_a_purpose_line() -> None:
    for file in queries.PREFIXES:
        text = (DB / "sql" / file).read_text("utf-8")
        for block in text.split("-- name: ")[1:]:
            lines = block.splitlines()
            assert lines[1].startswith("-- "), f"{lines[0]} in {file} has no purpose line"


def _executed(module: Path) -> dict[str, list[str]]:
    """Statement name -> the functions of ``module`` that send it (``execute`` /
    ``execute_rows`` with the name as a literal)."""
    out: dict[str, list[str]] = {}
    tree = ast.parse(module.read_text("utf-8"))
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("execute", "execute_rows")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
            ):
                out.setdefault(str(node.args[1].value), []).append(fn.name)
    return out


def test_every_statement_is_run_by_exactly_one_typed_function_named_after_it() -> None:
    for file, statements in queries.by_file().items():
        module = DB / file.replace(".sql", ".py")
        executed = _executed(module)
        assert set(executed) == set(statements), f"{module.name}: {set(executed) ^ set(statements)}"
        functions = {
            fn.name
            for fn in ast.parse(module.read_text("utf-8")).body
            if isinstance(fn, ast.FunctionDef)
        }
        for name in statements:
            assert executed[name] in ([name], [f"send_{name}"]), (name, executed[name])
            assert name in functions, f"{module.name} has no function {name}"
    # and no code outside cyclone_flow/db looks a statement up by name
    package = DB.parent
    for path in package.rglob("*.py"):
        if path.is_relative_to(DB):
            continue
        text = path.read_text("utf-8")
        assert not re.search(r"\bq\[", text), f"{path} looks up a statement itself"

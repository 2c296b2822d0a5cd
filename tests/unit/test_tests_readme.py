"""tests/README.md maps every module of the package to its tests, and the map stays true:
every module under ``cyclone_flow/`` has a row (a package's ``__init__.py`` when it holds
more than imports), every row names a module that exists, every test file a row names
exists, and every test file of the suite appears in a row. A failure names the rows to
fix (``missing: ...``, ``unknown: ...``), as a rename in another branch leaves them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers.doc_tables import markdown_tables
from helpers.paths import REPO

README = REPO / "tests" / "README.md"
PACKAGE = REPO / "cyclone_flow"
TESTS = REPO / "tests"


def _tables() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The module table (header ``Module``) and the table of what is no module
    (header ``Tested``)."""
    tables = markdown_tables(README.read_text(encoding="utf-8"))
    modules = [t for t in tables if t and "Module" in t[0] and "Tests" in t[0]]
    others = [t for t in tables if t and "Tested" in t[0] and "Tests" in t[0]]
    assert len(modules) == 1, "tests/README.md: one table with the columns Module | Tests"
    assert len(others) == 1, "tests/README.md: one table with the columns Tested | Tests"
    return modules[0], others[0]


def _spans(cell: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", cell)


def _holds_code(path: Path) -> bool:
    """Whether an ``__init__.py`` holds more than its docstring, imports and ``__all__``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                continue
        return True
    return False


def _package_modules() -> set[str]:
    """Every module of the package that needs a row, as ``cyclone_flow/...py``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        if path.name == "__init__.py" and not _holds_code(path):
            continue
        found.add(path.relative_to(REPO).as_posix())
    return found


def _rows() -> dict[str, list[str]]:
    """Module path -> the test files its row names."""
    modules, _ = _tables()
    rows: dict[str, list[str]] = {}
    for row in modules:
        [module] = _spans(row["Module"]) or [row["Module"]]
        assert module not in rows, f"tests/README.md: two rows for {module}"
        rows[module] = _spans(row["Tests"])
    return rows


def _report(**problems: list[str]) -> str:
    return "tests/README.md, module -> tests: " + "; ".join(
        f"{kind}: {', '.join(sorted(names))}" for kind, names in problems.items() if names
    )


def test_every_module_has_a_row_and_every_row_is_a_module() -> None:
    table = set(_rows())
    package = _package_modules()
    missing = sorted(package - table)
    unknown = sorted(m for m in table - package if not (REPO / m).is_file())
    assert not (missing or unknown), _report(missing=missing, unknown=unknown)


def test_every_row_names_tests() -> None:
    empty = [module for module, tests in _rows().items() if not tests]
    assert not empty, _report(**{"rows without tests": empty})


def test_every_test_file_named_exists_and_every_test_file_is_named() -> None:
    _, others = _tables()
    named: dict[str, list[str]] = {}
    for module, tests in _rows().items():
        for test in tests:
            named.setdefault(test, []).append(module)
    for row in others:
        [what] = _spans(row["Tested"]) or [row["Tested"]]
        assert (REPO / what).exists(), _report(**{"unknown (not in the repository)": [what]})
        for test in _spans(row["Tests"]):
            named.setdefault(test, []).append(what)
    on_disk = {
        p.relative_to(TESTS).as_posix()
        for p in TESTS.rglob("test_*.py")
        if "__pycache__" not in p.parts and "handlers" not in p.relative_to(TESTS).parts
    }
    unknown = [f"{test} (row {', '.join(named[test])})" for test in sorted(set(named) - on_disk)]
    missing = sorted(on_disk - set(named))
    assert not (missing or unknown), _report(
        **{"test files in no row": missing, "unknown test files": unknown}
    )

"""One fixture per lint code; each file states its expected problems in `# expect:` lines
(a fixture with warnings only loads; one with errors raises FlowError with the errors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.paths import REPO

from cyclone_flow.errors import FlowError
from cyclone_flow.flowfile import find_flow_files, lint_paths, load_flow

FIXTURES = Path(__file__).parent / "fixtures" / "lint"
EXPECT = re.compile(r"^# expect: ([EW]\d{3}) (\d+):(\d+)$", re.MULTILINE)
CASES = sorted(FIXTURES.glob("*.yaml"))


def _expected(path: Path) -> list[tuple[str, int, int]]:
    return sorted((c, int(ln), int(col)) for c, ln, col in EXPECT.findall(path.read_text()))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_fixture_reports_exactly_the_expected_problems(path: Path) -> None:
    expected = _expected(path)
    assert expected, f"{path.name} has no '# expect:' line"
    problems = lint_paths([str(path)])
    assert sorted((p.code, p.line, p.col) for p in problems) == expected
    assert all(p.path == str(path) for p in problems)
    errors = [e for e in expected if e[0].startswith("E")]
    if not errors:
        load_flow(path)  # warnings do not stop a load
        return
    with pytest.raises(FlowError) as info:
        load_flow(path)
    assert sorted((p.code, p.line, p.col) for p in info.value.problems) == errors


def test_every_documented_code_has_a_fixture_or_a_test() -> None:
    docs = (REPO / "docs" / "lint.md").read_text()
    documented = set(re.findall(r"^## ([EW]\d{3})", docs, re.MULTILINE))
    fixtures = {c for p in CASES for c, _, _ in _expected(p)}
    tested_elsewhere = {"E000", "E020", "E021", "E022", "E023", "E024", "E060", "W001"}
    retired = {"E025"}  # documented as retired; never reused
    assert documented == fixtures | tested_elsewhere | retired


def test_folder_is_searched_recursively() -> None:
    problems = lint_paths([str(FIXTURES)])
    assert {Path(p.path).name for p in problems} == {p.name for p in CASES}


def test_an_empty_condition_is_one_clear_error() -> None:
    path = FIXTURES / "e018_empty_condition.yaml"
    problems = lint_paths([str(path)])
    assert [(p.code, p.message) for p in problems] == [
        ("E018", "node 'b': when: is empty (write a condition, or true / false)"),
        ("E018", "node 'c': when: is empty (write a condition, or true / false)"),
    ]


def test_a_file_named_twice_is_linted_once() -> None:
    path = FIXTURES / "e018_empty_condition.yaml"
    once = lint_paths([str(path)])
    assert lint_paths([str(path), str(path), str(FIXTURES)]).count(once[0]) == 1
    assert find_flow_files([str(path), str(FIXTURES)])[0] == str(path)
    assert len(find_flow_files([str(path), str(FIXTURES)])) == len(CASES)

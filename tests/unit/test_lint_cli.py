from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cyclone_flow.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
GOOD = str(FIXTURES / "good" / "order.yaml")
CYCLE = str(FIXTURES / "lint" / "e010_cycle.yaml")


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.exit_code, result.stdout, result.stderr


def test_lint_clean_exits_0() -> None:
    code, out, err = run("lint", GOOD)
    assert (code, out) == (0, "")
    assert "no problems" in err


def test_lint_problems_text_exit_1() -> None:
    code, out, err = run("lint", CYCLE, GOOD)
    assert code == 1
    assert out.splitlines() == [
        f"{CYCLE}:6:13: error[E010]: dependency cycle: a -> b -> c -> a "
        "(each node needs the one before it)"
    ]
    assert "1 problem(s) in 1 file(s)" in err


def test_lint_json_format() -> None:
    code, out, _ = run("lint", "--format", "json", CYCLE)
    assert code == 1
    assert json.loads(out) == [
        {
            "path": CYCLE,
            "line": 6,
            "col": 13,
            "code": "E010",
            "severity": "error",
            "message": "dependency cycle: a -> b -> c -> a (each node needs the one before it)",
        }
    ]
    code, out, _ = run("lint", "--format", "json", GOOD)
    assert (code, json.loads(out)) == (0, [])


def test_lint_github_format() -> None:
    code, out, _ = run("lint", "--format", "github", CYCLE)
    assert code == 1
    assert out.startswith(f"::error file={CYCLE},line=6,col=13,title=E010::dependency cycle")


def test_lint_missing_path_is_usage_error() -> None:
    code, _, err = run("lint", GOOD, "does/not/exist.yaml")
    assert code == 2
    assert "does not exist" in err
    code, _, _ = run("lint")
    assert code == 2


def test_lint_folder_and_check_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "cli_lint_handlers", raising=False)
    (tmp_path / "cli_lint_handlers.py").write_text("def h(ctx, input):\n    return 1\n")
    flows = tmp_path / "flows" / "sub"
    flows.mkdir(parents=True)
    (flows / "a.yml").write_text("name: a\nnodes:\n  x: {call: 'cli_lint_handlers:h'}\n")
    assert run("lint", "--check-imports", "flows")[0] == 0
    (flows / "b.yaml").write_text("name: b\nnodes:\n  x: {call: 'cli_lint_handlers:nope'}\n")
    code, out, _ = run("lint", "--check-imports", "flows")
    assert code == 1
    assert out.startswith("flows/sub/b.yaml:3:13: error[E021]")
    sys.modules.pop("cli_lint_handlers", None)


def test_graph_formats() -> None:
    code, out, _ = run("graph", GOOD)
    assert code == 0
    assert out.startswith("flowchart TD")
    code, out, _ = run("graph", "--format", "dot", GOOD)
    assert code == 0
    assert out.startswith("digraph")


def test_graph_bad_file_prints_problems_exit_1() -> None:
    code, out, err = run("graph", CYCLE)
    assert code == 1
    assert out == ""
    assert "error[E010]" in err
    assert run("graph", "missing.yaml")[0] == 2


def test_lint_folder_without_flow_files_is_usage_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "readme.md").write_text("no flows here")
    dir_named_yaml = tmp_path / "x.yaml"
    dir_named_yaml.mkdir()
    for path in (empty, dir_named_yaml):
        code, out, err = run("lint", str(path))
        assert (code, out) == (2, "")
        assert f"no flow files (*.yaml, *.yml) found in '{path}'" in err
        assert "no problems found" not in err
    code, _, err = run("lint", GOOD, str(empty))
    assert code == 2
    assert str(empty) in err


def test_check_imports_with_an_import_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "cli_lint_elsewhere", raising=False)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "cli_lint_elsewhere.py").write_text("def h(ctx, input):\n    return 1\n")
    (tmp_path / "f.yaml").write_text("name: f\nnodes:\n  x: {call: 'cli_lint_elsewhere:h'}\n")
    code, out, _ = run("lint", "--check-imports", "f.yaml")
    assert code == 1 and "E020" in out  # not importable from the current folder alone
    monkeypatch.delitem(sys.modules, "cli_lint_elsewhere", raising=False)
    assert run("lint", "--check-imports", "--import-path", "lib", "f.yaml")[0] == 0
    sys.modules.pop("cli_lint_elsewhere", None)

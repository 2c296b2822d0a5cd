"""Did-you-mean suggestions: an unknown ``needs`` (E011), a reference to an
unknown node (E014) and, with ``--check-imports``, a missing function (E021) name the
close names; a name close to nothing gets no suggestion."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cyclone_flow.flowfile import lint_paths
from cyclone_flow.text import did_you_mean


def _lint(tmp_path: Path, text: str, check_imports: bool = False) -> dict[str, list[str]]:
    """code -> the messages of that code, in file order."""
    path = tmp_path / "flow.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    found: dict[str, list[str]] = {}
    for p in lint_paths([str(path)], check_imports=check_imports):
        found.setdefault(p.code, []).append(p.message)
    return found


def test_unknown_needs_and_references_suggest_close_node_names(tmp_path: Path) -> None:
    found = _lint(
        tmp_path,
        """\
        name: typos
        nodes:
          fetch_order: {call: "m:f"}
          charge:
            call: "m:f"
            needs: [fetch_ordr]
          ship:
            call: "m:f"
            needs: [charge]
            input: {x: "${{ nodes.chrge.output }}"}
          far: {call: "m:f", needs: [zzzzzz]}
        """,
    )
    assert found["E011"] == [
        "node 'charge' needs 'fetch_ordr', which is not a node; did you mean 'fetch_order'?",
        "node 'far' needs 'zzzzzz', which is not a node",
    ]
    (e014,) = found["E014"]
    assert e014.endswith("refers to node 'chrge', which is not a node; did you mean 'charge'?")


def test_a_name_close_to_nothing_gets_no_suggestion() -> None:
    assert did_you_mean("zzzzzz", ["fetch_order", "charge"]) == ""
    assert did_you_mean("go", ["go"]) == ""  # the name itself is not a suggestion
    assert did_you_mean("aprove", ["approve", "approved", "x"]) == (
        "; did you mean 'approve' or 'approved'?"
    )


@pytest.fixture
def handlers(tmp_path: Path) -> Iterator[str]:
    name = f"dym_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("def fetch_order(ctx, input):\n    return input\n")
    sys.path.insert(0, str(tmp_path))
    try:
        yield name
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_check_imports_suggests_a_close_function_name(tmp_path: Path, handlers: str) -> None:
    found = _lint(
        tmp_path,
        f'name: imports\nnodes:\n  a: {{call: "{handlers}:fetch_ordr"}}\n',
        check_imports=True,
    )
    (e021,) = found["E021"]
    assert e021.endswith(
        f"module {handlers!r} has no attribute 'fetch_ordr'; did you mean 'fetch_order'?"
    )

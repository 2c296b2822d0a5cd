"""W001: a ``${{ run.input.x }}`` reference to an input the flow's
``input_schema`` neither requires nor defaults is a lint warning, through the real CLI:
printed as ``warning[W001]``, exit 0, the flow still loads; a required or defaulted
input, or a flow without an input_schema, gets none."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

from helpers.paths import CLI

from cyclone_flow.flowfile import lint_paths, load_flow

FLOW = """\
name: optional
input_schema:
  type: object
  properties:
    id: {type: integer}
    note: {type: string}
    mode: {type: string, default: fast}
  required: [id]
nodes:
  a:
    call: "m:f"
    input: {id: "${{ run.input.id }}", mode: "${{ run.input.mode }}"}
  b:
    call: "m:f"
    input: {note: "${{ run.input.note }}", extra: "${{ run.input.extra.deep }}"}
"""


def _lint(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), "lint", *map(str, args)], capture_output=True, text=True, check=False
    )


def test_optional_input_references_are_warnings(tmp_path: Path) -> None:
    path = tmp_path / "flow.yaml"
    path.write_text(FLOW, encoding="utf-8")
    found = [(p.code, p.line, p.col, p.severity) for p in lint_paths([str(path)])]
    assert found == [("W001", 15, 19, "warning"), ("W001", 15, 51, "warning")]
    text = _lint(path)
    assert text.returncode == 0, text.stderr
    assert f"{path}:15:19: warning[W001]: '${{{{ run.input.note }}}}' refers to input 'note'" in (
        text.stdout
    )
    assert "which input_schema neither requires nor gives a default" in text.stdout
    assert "2 warning(s) in 1 file(s), no errors" in text.stderr
    rows = json.loads(_lint("--format", "json", path).stdout)
    assert [(r["code"], r["severity"]) for r in rows] == [("W001", "warning")] * 2
    github = _lint("--format", "github", path).stdout
    assert github.startswith("::warning file=")
    assert load_flow(path).name == "optional"  # a warning does not stop the load


def test_required_defaulted_or_unschemaed_inputs_get_no_warning(tmp_path: Path) -> None:
    path = tmp_path / "flow.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            name: plain
            nodes:
              a: {call: "m:f", input: {x: "${{ run.input.x }}"}}
            """
        ),
        encoding="utf-8",
    )
    assert lint_paths([str(path)]) == []
    fixed = FLOW.replace("required: [id]", "required: [id, note, extra]")
    path.write_text(fixed, encoding="utf-8")
    assert lint_paths([str(path)]) == []
    assert _lint(path).returncode == 0

"""Limits of the flow pipeline: file size, durations past 366 days, long `needs` chains."""

from __future__ import annotations

import random
from pathlib import Path

import networkx as nx
import pytest

from cyclone_flow.spec import NoFlowFilesError, lint_paths, lint_text, source
from cyclone_flow.spec.check import _non_ancestors
from cyclone_flow.spec.lint import LintPathError


def _chain(n: int) -> str:
    lines = ["name: chain", "nodes:"]
    for i in range(n):
        lines += [f"  node_{i}:", "    call: m:f"]
        if i:
            lines.append(f"    needs: [node_{i - 1}]")
            lines.append(f'    input: {{x: "${{{{ nodes.node_{i - 1}.output.x }}}}"}}')
    return "\n".join(lines) + "\n"


def test_5000_node_chain_lints_clean() -> None:
    text = _chain(5000)
    assert "${{ nodes.node_4998.output.x }}" in text
    assert lint_text(text) == []


def test_long_chain_still_reports_a_non_ancestor() -> None:
    text = _chain(300).replace("${{ nodes.node_0.output.x }}", "${{ nodes.node_299.output.x }}")
    problems = lint_text(text)
    assert [(p.code, p.line, p.col) for p in problems] == [("E013", 8, 16)]
    assert "refers to node 'node_299', which is not an ancestor" in problems[0].message


def test_non_ancestors_matches_networkx_ancestors() -> None:
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 10)
        graph = nx.DiGraph()
        graph.add_nodes_from(f"n{i}" for i in range(n))
        for _ in range(rng.randint(0, 2 * n)):
            a, b = rng.randrange(n), rng.randrange(n)
            if a != b:
                graph.add_edge(f"n{a}", f"n{b}")  # cycles included
        wanted = {
            f"n{i}": {f"n{j}" for j in range(n) if rng.random() < 0.5}
            for i in range(n)
            if rng.random() < 0.7
        }
        expected = {k: {t for t in v if t not in nx.ancestors(graph, k)} for k, v in wanted.items()}
        assert _non_ancestors(graph, wanted) == expected


def test_file_over_the_size_limit_is_e000_without_reading_it(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:  # sparse: stat says 2 MiB + 1, nothing is written
        fh.truncate(source.MAX_FILE_BYTES + 1)
    problems = lint_paths([str(big)])
    assert [(p.code, p.line, p.col, p.message) for p in problems] == [
        (
            "E000",
            1,
            1,
            "file is 2097153 bytes, over the 2 MiB limit for a flow file "
            "(pass large data as the run input instead)",
        )
    ]
    ok = tmp_path / "ok.yaml"
    ok.write_text("name: ok\nnodes:\n  a: {call: 'm:f'}\n" + "#" * 1000 + "\n")
    assert lint_paths([str(ok)]) == []


def test_endless_device_reads_at_most_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "MAX_FILE_BYTES", 4096)
    text, problem = source.read_text("/dev/zero")  # stat size 0, endless
    assert text is None and problem is not None
    assert (problem.code, problem.message) == (
        "E000",
        "file is more than 4096 bytes, over the 4096 bytes limit for a flow file "
        "(pass large data as the run input instead)",
    )


def test_folder_without_flow_files_raises(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "x.yaml").mkdir()  # a folder named like a flow file
    for path in (tmp_path, tmp_path / "x.yaml"):
        with pytest.raises(NoFlowFilesError) as info:
            lint_paths([str(path)])
        assert isinstance(info.value, LintPathError)
        assert info.value.exit_code == 2
        assert info.value.path == str(path)
        assert str(info.value) == f"no flow files (*.yaml, *.yml) found in {path}"

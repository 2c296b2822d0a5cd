"""Limits of the flow pipeline: file size, values, nesting, durations past 366 days, long
`needs` chains, and the big legal flows of benchmarks/lint.py."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import networkx as nx
import pytest

from cyclone_flow.errors import FlowError
from cyclone_flow.flowfile import NoFlowFilesError, lint_paths, lint_text, load, load_flow, read
from cyclone_flow.flowfile.check import _non_ancestors
from cyclone_flow.flowfile.lint import LintPathError


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
        fh.truncate(read.MAX_FILE_BYTES + 1)
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
    monkeypatch.setattr(read, "MAX_FILE_BYTES", 4096)
    text, problem = read.read_text("/dev/zero")  # stat size 0, endless
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


# -- limits checked before or while reading ----------------------------------------------

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.lint import dense_flow, padded, wide_mapping  # noqa: E402

SMALL_FLOW = "name: ok\nnodes:\n  a: {call: 'm:f'}\n"


def _no_parse(text: str, path: str = "<string>", **_: object) -> object:
    raise AssertionError(f"{path} was parsed")


def test_file_one_byte_over_2_mib_is_e000_and_never_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = 2 * 1024 * 1024
    over = tmp_path / "over.yaml"
    over.write_text(padded(SMALL_FLOW, cap + 1))
    at_cap = tmp_path / "at_cap.yaml"
    at_cap.write_text(padded(SMALL_FLOW, cap))
    assert (over.stat().st_size, at_cap.stat().st_size) == (cap + 1, cap)
    assert lint_paths([str(at_cap)]) == []  # the largest file accepted lints clean
    monkeypatch.setattr(load, "parse_yaml", _no_parse)
    with pytest.raises(AssertionError, match=r"at_cap\.yaml was parsed"):
        lint_paths([str(at_cap)])  # the spy sees a parse
    message = (
        "file is 2097153 bytes, over the 2 MiB limit for a flow file "
        "(pass large data as the run input instead)"
    )
    problems = lint_paths([str(over)])
    assert [(p.code, p.line, p.col, p.message) for p in problems] == [("E000", 1, 1, message)]
    with pytest.raises(FlowError) as info:
        load_flow(over)
    assert [p.message for p in info.value.problems] == [message]


def _long_list(items: int, tail: str = "") -> str:
    """A flow whose node input lists ``items`` zeros, item ``i`` on line ``6 + i``."""
    head = "name: cap\nnodes:\n  a:\n    call: m:f\n    input:\n"
    return head + "      - 0\n" * items + tail


def test_value_cap_stops_reading_at_the_first_value_over() -> None:
    # values: the root, 'cap', nodes, a, 'm:f', the input list, then its items: the
    # 200,001st value is item 199,994 (line 200,000). The syntax error at the end is never
    # reached: the old reader parsed the whole file first and reported that instead.
    text = _long_list(read.MAX_VALUES + 1000, tail="bad: [\n")
    problems = lint_text(text)
    assert [(p.code, p.line, p.col, p.message) for p in problems] == [
        ("E001", 200_000, 9, "the document expands to more than 200000 values")
    ]
    assert lint_text(_long_list(read.MAX_VALUES - 6)) == []  # exactly at the cap


@pytest.mark.parametrize("pure", [False, True], ids=["libyaml", "ruamel"])
def test_value_cap_counts_while_composing(pure: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read, "MAX_VALUES", 1000)
    made = []
    original = read._Node

    class Counted(original):  # type: ignore[misc, valid-type]
        __slots__ = ()

        def __init__(self, *args: object) -> None:
            made.append(1)
            super().__init__(*args)

    monkeypatch.setattr(read, "_Node", Counted)
    doc, problems = read.parse_yaml(_long_list(20_000, tail="bad: [\n"), pure=pure)
    assert doc is None
    assert [(p.code, p.line, p.col) for p in problems] == [("E001", 1000, 9)]
    assert len(made) < 1100  # nodes composed: about the cap, not the 20,000 items


def test_alias_bomb_stops_at_the_alias_that_goes_over() -> None:
    # a0 holds 11 values, a1 111, ..., a4 111,111: the total passes 200,000 at the first
    # *a4 of line 6 (the old reader expanded the aliases and pointed inside a0)
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]")
    problems = lint_text("\n".join(lines))
    assert [(p.code, p.line, p.col, p.message) for p in problems] == [
        ("E001", 6, 10, "the document expands to more than 200000 values")
    ]


def test_block_nesting_over_the_limit_stops_reading() -> None:
    # k0 is a key of the top level (level 0): k{i}'s value is at level i + 1. The mapping
    # holding k101 is the first value deeper than 100 levels; a syntax error follows.
    lines = [f"{'  ' * i}k{i}:" for i in range(102)] + ["bad: ["]
    problems = lint_text("\n".join(lines) + "\n")
    assert [(p.code, p.line, p.col, p.message) for p in problems] == [
        ("E001", 102, 203, "nesting is deeper than 100 levels")
    ]
    assert "E001" not in {p.code for p in lint_text("\n".join(lines[:100]) + "\n")}


def _line_of(text: str, line: str) -> int:
    return text.splitlines().index(line) + 1


def test_dense_2000_node_flow_lints_clean_with_its_positions() -> None:
    text = dense_flow()
    assert 1_000_000 < len(text) < read.MAX_FILE_BYTES
    doc, problems = load.analyse_text(text, "dense.yaml")
    assert problems == [] and doc is not None
    nodes = doc.data["nodes"]  # type: ignore[index, call-overload]
    assert len(nodes) == 2000
    assert sum(len(n.get("needs", [])) for n in nodes.values()) == 6 * 1999 - 15
    for i in (1, 777, 1999):
        line = _line_of(text, f"  node_{i}:")
        assert doc.key_pos(("nodes", f"node_{i}")) == (line, 3)
        assert doc.value_pos(("nodes", f"node_{i}", "call")) == (line + 1, 11)
        assert doc.value_pos(("nodes", f"node_{i}", "needs", 0)) == (line + 2, 13)
        first = nodes[f"node_{i}"]["needs"][0]
        ref = line + 4  # the first input key, a reference to needs[0]
        assert doc.key_pos(("nodes", f"node_{i}", "input", f"from_{first[5:]}")) == (ref, 7)
        assert doc.value_pos(("nodes", f"node_{i}", "input", f"from_{first[5:]}")) == (
            ref,
            14 + len(first[5:]),
        )


def test_wide_50000_key_mapping_lints_clean_with_its_positions() -> None:
    text = wide_mapping()
    assert 1_000_000 < len(text) < read.MAX_FILE_BYTES
    doc, problems = load.analyse_text(text, "wide.yaml")
    assert problems == [] and doc is not None
    mapping = doc.data["nodes"]["a"]["input"]  # type: ignore[index, call-overload]
    assert len(mapping) == 50_000 and mapping["k31337"] == "v31337"
    for i in (0, 31337, 49999):
        line = _line_of(text, f"      k{i:05d}: v{i:05d}")
        assert doc.key_pos(("nodes", "a", "input", f"k{i:05d}")) == (line, 7)
        assert doc.value_pos(("nodes", "a", "input", f"k{i:05d}")) == (line, 15)

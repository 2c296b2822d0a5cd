"""The YAML reader (cyclone_flow/flowfile/read.py): libyaml's events and ruamel.yaml's pure
parser must give the same document, positions and problems; what libyaml rejects is read
by ruamel.yaml; merge keys, duplicate keys and tags behave as they did with ruamel.yaml's
round-trip loader."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from ruamel.yaml import YAML
from test_flowfile_fuzz import DOCS

from cyclone_flow.errors import Problem
from cyclone_flow.flowfile import read
from cyclone_flow.flowfile.read import parse_yaml

REPO = Path(__file__).resolve().parents[2]
FILES = sorted([*REPO.glob("examples/flows/*.yaml"), *REPO.glob("tests/unit/fixtures/**/*.yaml")])
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CASES = [
    "a: 1\nb: [x, {c: d}]\nc: 'q'\nd: \"\\u00e9\\t\"\ne: ~\nf: -1.5e3\ng: 0x1F\nh: 0o17\ni: 007\n",
    "a: |\n  line\n  two\nb: >-\n  folded\n  text\nc: # comment\n  - x\n  -   y\n",
    "x: &a {p: 1, q: [1, 2]}\ny:\n  <<: *a\n  p: 3\nz: *a\n",
    "x: &a {p: 1}\nw: &b {p: 2, r: 4}\ny:\n  <<: [*a, *b]\n  s: 5\n",
    "%YAML 1.1\n---\na: yes\nb: 017\nc: 1:30\nd: on\n",
    "a: 2024-01-01\nb: !!set {x}\nc: !foo 1\nd: !!binary aGk=\ne: .nan\n1: x\n",
    "a: 1\nb: {c: 1, c: 2}\n",
    "a: {b: 1, b: 2}\nc: [\n",
    "a: !!int x\n",
    "x: &a 1\ny: {<<: *a}\n",
    "a: *undefined\n",
    "a: 1\n---\nb: 2\n",
    "- just\n- a list\n",
    "",
    "a: &x [1, *x]\n",
    "? [a, b]\n: c\n",
    "a:\n  - b: 1\n    c: [d, e]\n  - !!str 3\n",
]


def _summary(result: tuple[read.Document | None, list[Problem]]) -> Any:
    doc, problems = result
    if doc is None:
        return [(p.code, p.line, p.col, p.message) for p in problems]
    return json.dumps(doc.data), sorted(doc.values.items()), sorted(doc.keys.items())


def _same_both_ways(text: str) -> None:
    assert _summary(parse_yaml(text)) == _summary(parse_yaml(text, pure=True)), text


def test_libyaml_is_the_parser_in_use() -> None:
    assert read.YAML_PARSER == "libyaml"  # PyYAML with libyaml: lint is fast


@pytest.mark.parametrize("text", CASES)
def test_libyaml_and_ruamel_read_these_alike(text: str) -> None:
    _same_both_ways(text)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_libyaml_and_ruamel_read_every_fixture_and_example_alike(path: Path) -> None:
    _same_both_ways(path.read_text(encoding="utf-8-sig"))


@SETTINGS
@given(DOCS)
def test_libyaml_and_ruamel_read_random_documents_alike(doc: object) -> None:
    _same_both_ways(json.dumps(doc, allow_nan=True))
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    stream = io.StringIO()
    try:
        yaml.dump(doc, stream)
    except Exception:
        return
    _same_both_ways(stream.getvalue())


@pytest.mark.parametrize(
    ("text", "data"),
    [
        ("a: [b:, c]\n", {"a": ["b:", "c"]}),
        ("a: &x.y 1\nb: *x.y\n", {"a": 1, "b": 1}),
    ],
)
def test_what_libyaml_rejects_is_read_by_ruamel(text: str, data: object) -> None:
    doc, problems = parse_yaml(text)
    assert problems == [] and doc is not None
    assert doc.data == data
    _same_both_ways(text)


def test_lines_ending_in_unicode_line_separators_are_left_to_ruamel() -> None:
    # libyaml ends lines at NEL / U+2028 as YAML 1.1 does; ruamel.yaml (1.2) does not
    text = "a: b\u2028c: d\n"
    assert [p.code for p in parse_yaml(text)[1]] == ["E001"]
    _same_both_ways(text)


def test_merge_keys_keep_explicit_keys_first_and_positions_in_the_anchor() -> None:
    text = textwrap.dedent(
        """\
        base: &base {p: 1, q: 2}
        more: &more {q: 3, r: 4}
        node:
          s: 0
          <<: [*base, *more]
          p: 5
        """
    )
    doc, problems = parse_yaml(text)
    assert problems == [] and doc is not None
    node = doc.data["node"]  # type: ignore[index, call-overload]
    assert list(node.items()) == [("s", 0), ("p", 5), ("q", 2), ("r", 4)]
    assert doc.key_pos(("node", "p")) == (6, 3)  # its own key
    assert doc.key_pos(("node", "q")) == (1, 20)  # from the first merged mapping
    assert doc.value_pos(("node", "r")) == (2, 23)


def test_duplicate_keys_and_merges() -> None:
    def codes(text: str) -> list[tuple[str, int, int]]:
        return [(p.code, p.line, p.col) for p in parse_yaml(textwrap.dedent(text))[1]]

    assert codes("a: {b: 1, c: 2, b: 3}\n") == [("E002", 1, 17)]
    assert codes("x: &a {p: 1}\ny: {<<: *a, <<: *a}\n") == [("E002", 2, 13)]
    assert codes("a: 1\nb: 2\na: 3\nc: [\n") == [("E001", 5, 1)]  # a syntax error wins
    assert codes("y: {<<: [1]}\n") == [("E001", 1, 10)]  # merges mappings only
    assert codes("x: &a [1]\ny: {<<: [*a]}\n") == [("E001", 1, 4)]  # at the anchor
    assert codes("a: 1\n'<<': 2\n") == []  # a quoted << is a plain key


def test_tags_on_collections() -> None:
    def first(text: str) -> tuple[str, str]:
        problem = parse_yaml(text)[1][0]
        return problem.code, problem.message

    assert first("a: !!set {x}") == ("E004", "a YAML set is not a JSON value: use a list")
    assert first("a: !!omap [{x: 1}]") == (
        "E004",
        "unsupported YAML tag 'tag:yaml.org,2002:omap'",
    )
    assert first("a: !foo [1]") == ("E004", "unsupported YAML tag '!foo'")
    assert first("a: !!seq {x: 1}") == (
        "E001",
        "YAML syntax error: expected a sequence node, but found mapping",
    )
    doc, _ = parse_yaml("a: !!map {x: 1}\nb: !!seq [1]\n")
    assert doc is not None and doc.data == {"a": {"x": 1}, "b": [1]}


# -- errors at their position, in words of their own -------------------------------------

BAD_SCALARS = [
    # (text of the `input:` value, code, column, words of the message)
    ('{k: "\\U0010FFFF\\UFFFFFFFF"}', "E001", 25, "escape \\UFFFFFFFF, which is no Unicode"),
    ('{k: "\\U00110000"}', "E001", 15, "escape \\U00110000, which is no Unicode"),
    ('!!int "0x_"', "E004", 8, "'0x_' is not an integer (its tag is !!int)"),
    ('!!int ""', "E004", 8, "'' is not an integer"),
    ('!!timestamp "2001-99-99"', "E004", 8, "'2001-99-99' is not a date/time"),
    ('!!timestamp "x"', "E004", 8, "'x' is not a date/time"),
    ('!!float "abc"', "E004", 8, "'abc' is not a number (its tag is !!float)"),
    ("!!bool maybe", "E004", 8, "'maybe' is not a boolean"),
]


@pytest.mark.parametrize(("value", "code", "col", "words"), BAD_SCALARS)
@pytest.mark.parametrize("pure", [False, True], ids=["libyaml", "ruamel"])
def test_a_bad_scalar_is_reported_at_its_position(
    value: str, code: str, col: int, words: str, pure: bool
) -> None:
    text = f"name: f\nnodes: {{a: {{call: 'm:f'}}}}\ninput: {value}\n"
    doc, problems = parse_yaml(text, pure=pure)
    assert doc is None
    assert [(p.code, p.line, p.col) for p in problems] == [(code, 3, col)]
    assert words in problems[0].message, problems[0].message
    for internal in ("Python int", "out of range", "must be in", "could not convert", "C int"):
        assert internal not in problems[0].message


def test_an_explicit_int_with_two_signs_reads_as_ruamel_reads_it() -> None:
    # the composer's shortcut for decimals gave int('+-5'): a ValueError at 1:1
    _same_both_ways("a: !!int '+-5'\nb: 007\nc: -007\n")
    doc, problems = parse_yaml("a: !!int '+-5'\nb: 007\n")
    assert problems == [] and doc is not None and doc.data == {"a": -5, "b": 7}


def _big(text: str) -> str:
    """``text`` after comment lines that make it larger than the ruamel fallback."""
    lines = read.RUAMEL_FALLBACK_MAX_CHARS // 100 + 1
    return ("#" * 99 + "\n") * lines + text


@pytest.fixture
def ruamel_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times ruamel.yaml's parser was set up (it reads what libyaml rejects)."""
    made: list[int] = []

    class Counted(YAML):
        def parse(self, stream: Any) -> Any:
            made.append(1)
            return super().parse(stream)

    monkeypatch.setattr(read, "YAML", Counted)
    return made


def test_a_large_file_libyaml_rejects_gets_libyamls_error_without_ruamel(
    ruamel_reads: list[int],
) -> None:
    small = "name: f\nnodes: {a: {call: 'm:f'}}\ninput: [1, 2\n"
    big = _big(small)
    assert len(small) < read.RUAMEL_FALLBACK_MAX_CHARS < len(big)
    (worded_by_ruamel,) = parse_yaml(small)[1]
    assert ruamel_reads == [1]
    (worded_by_libyaml,) = parse_yaml(big)[1]
    assert ruamel_reads == [1]  # not read again in pure Python
    offset = big.count("\n") - small.count("\n")
    assert (worded_by_libyaml.code, worded_by_libyaml.line - offset) == ("E001", 4)
    assert worded_by_libyaml.message.startswith("YAML syntax error: while parsing a flow")
    assert worded_by_ruamel.code == "E001" and worded_by_ruamel.line == 4


def test_a_large_file_with_a_bad_escape_gets_libyamls_error_at_the_escape(
    ruamel_reads: list[int],
) -> None:
    text = _big("name: f\nnodes: {a: {call: 'm:f'}}\ninput: {k: \"\\U0010FFFF\\UFFFFFFFF\"}\n")
    (problem,) = parse_yaml(text)[1]
    assert ruamel_reads == []
    assert (problem.code, problem.line, problem.col) == ("E001", text.count("\n"), 25)
    assert problem.message == (
        "YAML syntax error: while parsing a quoted scalar found invalid Unicode character "
        "escape code"
    )

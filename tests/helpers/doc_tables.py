"""Read the pipe tables of the user guide (docs/*.md), for the tests that keep the docs
in step with the code."""

from __future__ import annotations

import re

from helpers.paths import REPO

DOCS = REPO / "docs"
_ROW = re.compile(r"^\|(.*)\|\s*$")
_RULE = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$")


def _cells(line: str) -> list[str]:
    match = _ROW.match(line)
    assert match, line
    # a pipe inside a code span is written \| in the docs
    parts = re.split(r"(?<!\\)\|", match.group(1))
    return [p.strip().replace("\\|", "|") for p in parts]


def markdown_tables(text: str) -> list[list[dict[str, str]]]:
    """Every pipe table of ``text``: a list of rows, each a dict header -> cell text."""
    tables: list[list[dict[str, str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines) - 1:
        if _ROW.match(lines[i]) and _RULE.match(lines[i + 1]):
            header = _cells(lines[i])
            rows = []
            i += 2
            while i < len(lines) and _ROW.match(lines[i]):
                cells = _cells(lines[i])
                assert len(cells) == len(header), f"ragged row: {lines[i]!r}"
                rows.append(dict(zip(header, cells, strict=True)))
                i += 1
            tables.append(rows)
        else:
            i += 1
    return tables


def code_spans(text: str) -> list[str]:
    """The contents of every inline code span of ``text``."""
    return re.findall(r"`([^`\n]+)`", text)

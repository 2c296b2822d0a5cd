"""Two flow sources side by side (:mod:`cyclone_flow.ui.source_diff`): every line of both
in order, unchanged lines facing each other, removed and added lines facing a blank, a
replaced block paired, lines cut at ``\\n`` only."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed")

from cyclone_flow.ui.source_diff import SideBySideRow, side_by_side


def _cells(rows: list[SideBySideRow]) -> list[tuple[object, ...]]:
    return [
        (r.left.number, r.left.text, r.left.kind, r.right.number, r.right.text, r.right.kind)
        for r in rows
    ]


def test_equal_sources_are_every_line_unchanged() -> None:
    text = "name: a\n# a comment\nnodes: {}\n"
    rows = side_by_side(text, text)
    assert _cells(rows) == [
        (1, "name: a", "same", 1, "name: a", "same"),
        (2, "# a comment", "same", 2, "# a comment", "same"),
        (3, "nodes: {}", "same", 3, "nodes: {}", "same"),
    ]
    assert not any(r.changed for r in rows)


def test_removed_added_and_changed_lines_face_blanks_or_each_other() -> None:
    old = "name: a\nnodes:\n  x:\n    call: m:f\n  gone:\n    call: m:g\n"
    new = "name: a\n# new comment\nnodes:\n  x:\n    call: m:h\n"
    rows = side_by_side(old, new)
    assert _cells(rows) == [
        (1, "name: a", "same", 1, "name: a", "same"),
        (None, "", "blank", 2, "# new comment", "added"),
        (2, "nodes:", "same", 3, "nodes:", "same"),
        (3, "  x:", "same", 4, "  x:", "same"),
        (4, "    call: m:f", "changed", 5, "    call: m:h", "changed"),
        (5, "  gone:", "removed", None, "", "blank"),
        (6, "    call: m:g", "removed", None, "", "blank"),
    ]
    assert [r.changed for r in rows] == [False, True, False, False, True, True, True]


def test_repeated_lines_still_match_and_only_newlines_cut_lines() -> None:
    repeated = "".join(f"  n{i}:\n    needs: [a]\n" for i in range(300))
    rows = side_by_side("nodes:\n" + repeated, "nodes:\n" + repeated + "  z:\n")
    assert sum(r.changed for r in rows) == 1  # no junk heuristic: 300 repeats still match
    form_feed = "# a\x0cb\u2028c\n"
    rows = side_by_side(form_feed, "")
    assert _cells(rows) == [(1, "# a\x0cb\u2028c", "removed", None, "", "blank")]
    # an empty side, and no final newline
    assert _cells(side_by_side("", "x: 1")) == [(None, "", "blank", 1, "x: 1", "added")]

"""Two flow sources side by side: the rows of a two-column diff, each line on its side
with its number and whether it is unchanged, removed, added or changed.

The lines are matched by :class:`difflib.SequenceMatcher` (no junk heuristic: a flow file
repeats lines such as ``needs: [fetch]`` and they must still match); a replaced block
pairs its lines in order, the longer side's extra lines facing a blank. The text is kept
as it is (the template escapes it). Lines are cut at ``\\n`` only, as
:func:`cyclone_flow.flowfile.compare.source_diff` cuts them, so a form feed or a
``\\u2028`` in a comment stays inside its line.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

__all__ = ["Side", "SideBySideRow", "side_by_side"]

Kind = Literal["same", "removed", "added", "changed", "blank"]


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a row: its line number (from 1; None on a blank side), its text
    without the newline, and its kind (``blank``: no line faces the other side's)."""

    number: int | None
    text: str
    kind: Kind


@dataclass(frozen=True, slots=True)
class SideBySideRow:
    """A row: the old source's line on the left, the new source's on the right."""

    left: Side
    right: Side

    @property
    def changed(self) -> bool:
        return self.left.kind != "same"


_BLANK = Side(None, "", "blank")


def _lines(text: str) -> list[str]:
    """``text`` cut at ``\\n`` only, without the newlines (no last empty line)."""
    parts = text.split("\n")
    return parts[:-1] if parts and parts[-1] == "" else parts


def side_by_side(old: str, new: str) -> list[SideBySideRow]:
    """Every line of ``old`` and ``new`` as rows, in order: unchanged lines side by side,
    a removed line facing a blank, an added one likewise, a replaced block pairing its
    lines (``changed`` both sides) with the extra lines of the longer side ``removed`` or
    ``added``."""
    a, b = _lines(old), _lines(new)
    rows: list[SideBySideRow] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows.extend(
                SideBySideRow(Side(i + 1, a[i], "same"), Side(j + 1, b[j], "same"))
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
            )
            continue
        left = [Side(i + 1, a[i], "removed") for i in range(i1, i2)]
        right = [Side(j + 1, b[j], "added") for j in range(j1, j2)]
        if tag == "replace":
            paired = min(len(left), len(right))
            for k in range(paired):
                left[k] = Side(left[k].number, left[k].text, "changed")
                right[k] = Side(right[k].number, right[k].text, "changed")
        for k in range(max(len(left), len(right))):
            rows.append(
                SideBySideRow(
                    left[k] if k < len(left) else _BLANK, right[k] if k < len(right) else _BLANK
                )
            )
    return rows

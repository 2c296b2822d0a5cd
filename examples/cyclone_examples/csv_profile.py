"""CSV profiles: the fan-out and child-flow examples.

- ``examples/flows/csv_fan_out.yaml``: ``list_files`` -> fan-out ``profile_file`` over
  every CSV file in ``examples/data`` (one item step per file) -> ``combine``.
- ``examples/flows/csv_profile.yaml`` (a flow run as a child): ``profile_file`` ->
  ``describe``; ``examples/flows/csv_children.yaml`` runs it once per data file as two
  child nodes and compares the results.

The pure transforms (:func:`profile_lines`, :func:`combine_profiles`, :func:`describe_profile`)
take and return plain data; the handlers only read files by name from ``examples/data``.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ._common import DATA_DIR, data_file, require

if TYPE_CHECKING:
    from cyclone_flow import Context


# --- pure transforms -------------------------------------------------------------------------


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def profile_lines(name: str, lines: Iterable[str]) -> dict[str, Any]:
    """Profile one CSV text: its row count and, per column, either numeric statistics
    (``min``, ``max``, ``mean``, rounded to 3 places) when every non-empty cell is a finite
    number, or the number of distinct values and the most common one.

    Raises ``ValueError`` for a file without a header or a row of the wrong width (with
    its line number).
    """
    reader = csv.reader(lines)
    header = next(reader, None)
    if not header:
        raise ValueError(f"{name}: no header line")
    columns = [h.strip() for h in header]
    values: list[list[str]] = [[] for _ in columns]
    rows = 0
    for line, record in enumerate(reader, start=2):
        if not record:
            continue
        if len(record) != len(columns):
            raise ValueError(
                f"{name}: line {line}: expected {len(columns)} fields, got {len(record)}"
            )
        rows += 1
        for i, cell in enumerate(record):
            values[i].append(cell.strip())
    profile: dict[str, Any] = {}
    for column, cells in zip(columns, values, strict=True):
        filled = [c for c in cells if c]
        numbers = [_number(c) for c in filled]
        if filled and all(n is not None for n in numbers):
            nums = [n for n in numbers if n is not None]
            profile[column] = {
                "kind": "number",
                "min": round(min(nums), 3),
                "max": round(max(nums), 3),
                "mean": round(sum(nums) / len(nums), 3),
            }
        else:
            counts = Counter(filled)
            top, top_count = counts.most_common(1)[0] if counts else ("", 0)
            profile[column] = {
                "kind": "text",
                "distinct": len(counts),
                "most_common": top,
                "most_common_count": top_count,
            }
    return {"file": name, "rows": rows, "columns": columns, "profile": profile}


def combine_profiles(profiles: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Summarise the profiles of several files (in the order given): file count, total
    rows, the largest file, and per file its row and column counts."""
    if not profiles:
        return {"files": 0, "rows": 0, "largest": None, "per_file": []}
    largest = max(profiles, key=lambda p: p["rows"])
    return {
        "files": len(profiles),
        "rows": sum(p["rows"] for p in profiles),
        "largest": largest["file"],
        "per_file": [
            {"file": p["file"], "rows": p["rows"], "columns": len(p["columns"])} for p in profiles
        ],
    }


def describe_profile(profile: dict[str, Any]) -> list[str]:
    """One human-readable line per column of a profile."""
    lines = [f"{profile['file']}: {profile['rows']} rows"]
    for column, info in profile["profile"].items():
        if info["kind"] == "number":
            lines.append(f"{column}: {info['min']} .. {info['max']} (mean {info['mean']})")
        else:
            lines.append(
                f"{column}: {info['distinct']} distinct, most common "
                f"{info['most_common']!r} ({info['most_common_count']}x)"
            )
    return lines


# --- handlers --------------------------------------------------------------------------------


def list_files(ctx: Context, input: Any) -> dict[str, Any]:
    """``{"files": [...]}``: the CSV files in ``examples/data``, sorted by name."""
    return {"files": sorted(p.name for p in DATA_DIR.glob("*.csv"))}


def profile_file(ctx: Context, input: Any) -> dict[str, Any]:
    """Profile one data file; ``input`` is its name (a fan-out item) or ``{"file": name}``."""
    name = input if isinstance(input, str) else require(input, "file")
    path = data_file(name)
    with path.open(encoding="utf-8", newline="") as fh:
        return profile_lines(name, io.StringIO(fh.read()))


def combine(ctx: Context, input: Any) -> dict[str, Any]:
    """``{"profiles": [...]}`` (the fan-out node's output, in file order) -> summary."""
    profiles = require(input, "profiles")
    if not isinstance(profiles, list):
        raise ValueError("profiles must be a list")
    return combine_profiles(profiles)


def describe(ctx: Context, input: Any) -> dict[str, Any]:
    """``{"profile": {...}}`` -> ``{"file", "rows", "lines": [...]}``."""
    profile = require(input, "profile")
    return {"file": profile["file"], "rows": profile["rows"], "lines": describe_profile(profile)}


def compare(ctx: Context, input: Any) -> dict[str, Any]:
    """``{"a": child output, "b": child output}`` (each ``{"describe": {...}}``): which file
    has more rows, and both descriptions."""
    a = require(require(input, "a"), "describe")
    b = require(require(input, "b"), "describe")
    bigger = a if a["rows"] >= b["rows"] else b
    return {
        "larger": bigger["file"],
        "rows": {a["file"]: a["rows"], b["file"]: b["rows"]},
        "descriptions": [a["lines"], b["lines"]],
    }

"""Read a flow file's YAML into plain JSON data, remembering where every key and value is.

The round-trip loader of ruamel.yaml keeps 1-based positions for the problems. Anchors,
aliases and merge keys (``<<: *base``) are expanded. Values that JSON cannot hold are
rejected (code E004) rather than converted: timestamps (``2024-01-01``: quote it), sets,
binary, NaN and infinities, custom tags, and mapping keys that are not strings.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, CommentedSet, TaggedScalar
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError

from cyclone_flow.errors import Problem
from cyclone_flow.spec.model import JSON

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_VALUES",
    "Document",
    "JsonPath",
    "parse_yaml",
    "read_text",
]

MAX_DEPTH = 100
"""Deepest nesting of mappings and lists accepted (E001 beyond)."""

MAX_VALUES = 200_000
"""Most values accepted after expanding aliases (E001 beyond; stops alias bombs)."""

MAX_FILE_BYTES = 10 * 1024 * 1024
"""Largest flow file read (E000 beyond): checked before reading, and at most one byte
more is ever read, so a device or pipe cannot exhaust memory."""

JsonPath = tuple[str | int, ...]
Position = tuple[int, int]

_STD_TAG = "tag:yaml.org,2002:"


@dataclass
class Document:
    """A parsed flow file: plain JSON ``data`` plus 1-based (line, col) positions.

    ``values[p]`` is where the value at JSON path ``p`` starts; ``keys[p]`` is where the
    mapping key ending path ``p`` is written.
    """

    path: str
    data: JSON
    values: dict[JsonPath, Position] = field(default_factory=dict)
    keys: dict[JsonPath, Position] = field(default_factory=dict)

    def value_pos(self, path: Iterable[str | int]) -> Position:
        """Position of the value at ``path``, or of its closest known ancestor."""
        p = tuple(path)
        while p:
            if p in self.values:
                return self.values[p]
            p = p[:-1]
        return self.values.get((), (1, 1))

    def key_pos(self, path: Iterable[str | int]) -> Position:
        """Position of the key ending ``path`` (list items and the root: their value)."""
        p = tuple(path)
        if p in self.keys:
            return self.keys[p]
        return self.value_pos(p)

    def problem(self, pos: Position, code: str, message: str) -> Problem:
        """A :class:`Problem` in this file at ``pos``."""
        return Problem(self.path, pos[0], pos[1], code, message)


def read_text(path: str) -> tuple[str | None, Problem | None]:
    """Read ``path`` as UTF-8 text (a BOM is dropped).

    Returns ``(text, None)``, or ``(None, problem)`` with code E000 when the file cannot
    be read, is larger than :data:`MAX_FILE_BYTES`, or is not UTF-8 text. Never raises
    for a bad file.
    """
    limit = MAX_FILE_BYTES
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                return None, _too_big(path, f"{size} bytes", limit)
            raw = fh.read(limit + 1)
    except OSError as exc:
        return None, Problem(path, 1, 1, "E000", f"cannot read file: {exc.strerror or exc}")
    if len(raw) > limit:  # grew, or a device/pipe whose size stat does not tell
        return None, _too_big(path, f"more than {limit} bytes", limit)
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        return None, Problem(
            path, line, col, "E000", f"not UTF-8 text (invalid byte at offset {exc.start})"
        )


def _too_big(path: str, size: str, limit: int) -> Problem:
    mib = limit / (1024 * 1024)
    shown = f"{mib:g} MiB" if mib >= 1 else f"{limit} bytes"
    return Problem(path, 1, 1, "E000", f"file is {size}, over the {shown} limit")


def parse_yaml(text: str, path: str = "<string>") -> tuple[Document | None, list[Problem]]:
    """Parse one YAML document into a :class:`Document`.

    Returns ``(document, [])`` on success, else ``(None, problems)`` with codes E001 (YAML
    syntax, too deep, too large), E002 (duplicate key), E004 (a value JSON cannot hold) or
    E005 (empty file, or a top level that is not a mapping). Never raises for bad text.
    """
    too_deep = _flow_nesting_overflow(text)
    if too_deep is not None:
        line, col = _offset_pos(text, too_deep)
        return None, [
            Problem(path, line, col, "E001", f"nesting is deeper than {MAX_DEPTH} levels")
        ]
    yaml = YAML(typ="rt")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = yaml.load(text)
    except DuplicateKeyError as exc:
        return None, [_marked(path, exc, "E002", _duplicate_message(exc))]
    except MarkedYAMLError as exc:
        message = " ".join(s for s in (exc.context, exc.problem) if s) or "invalid YAML"
        return None, [_marked(path, exc, "E001", f"YAML syntax error: {message}")]
    except ReaderError as exc:
        line, col = _offset_pos(text, exc.position)
        return None, [Problem(path, line, col, "E001", f"YAML syntax error: {exc.reason}")]
    except RecursionError:
        return None, [Problem(path, 1, 1, "E001", "YAML nesting is too deep")]
    except (YAMLError, Exception) as exc:  # ruamel may raise plain errors on odd input
        return None, [Problem(path, 1, 1, "E001", f"cannot parse YAML: {exc}")]

    doc = Document(path, None)
    if raw is None:
        return None, [doc.problem((1, 1), "E005", "the file is empty: expected a flow mapping")]
    if not isinstance(raw, dict):
        return None, [
            doc.problem(
                (1, 1),
                "E005",
                f"the top level must be a mapping (name:, nodes:, ...), not {_yaml_kind(raw)}",
            )
        ]
    converter = _Converter(doc)
    doc.values[()] = _lc(raw) or (1, 1)
    doc.data = converter.convert(raw, (), 0, (1, 1))
    if converter.problems:
        return None, converter.problems
    return doc, []


def _flow_nesting_overflow(text: str) -> int | None:
    """Offset where ``[``/``{`` nesting first exceeds MAX_DEPTH, else None.

    A cheap guard run before parsing: ruamel is slow to fail on very deep flow
    collections. Brackets inside quoted strings count too, which only matters for more
    than MAX_DEPTH unbalanced brackets.
    """
    depth = 0
    for offset, char in enumerate(text):
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return offset
        elif char in "]}":
            depth = max(0, depth - 1)
    return None


def _marked(path: str, exc: MarkedYAMLError, code: str, message: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    if mark is None:
        return Problem(path, 1, 1, code, message)
    return Problem(path, mark.line + 1, mark.column + 1, code, message)


def _duplicate_message(exc: MarkedYAMLError) -> str:
    found = re.search(r'duplicate key "(.*?)"', exc.problem or "")
    key = found.group(1) if found else "?"
    return f"duplicate key {key!r}: keys must be unique within a mapping"


def _offset_pos(text: str, offset: int) -> Position:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _lc(node: Any) -> Position | None:
    lc = getattr(node, "lc", None)
    if lc is None or lc.line is None:
        return None
    return lc.line + 1, lc.col + 1


def _yaml_kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    return "a " + type(value).__name__


def _bad_tag(node: Any) -> str | None:
    tag = getattr(node, "tag", None)
    value = getattr(tag, "value", tag)
    if isinstance(value, str) and value and not value.startswith(_STD_TAG):
        return value
    return None


class _Converter:
    """ruamel nodes -> plain JSON, filling the document's positions; collects E001/E004."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.problems: list[Problem] = []
        self.count = 0

    def fail(self, pos: Position, code: str, message: str) -> None:
        self.problems.append(self.doc.problem(pos, code, message))

    def convert(self, node: Any, path: JsonPath, depth: int, pos: Position) -> JSON:
        self.count += 1
        if self.count > MAX_VALUES:
            if self.count == MAX_VALUES + 1:
                self.fail(pos, "E001", f"the document expands to more than {MAX_VALUES} values")
            return None
        if depth > MAX_DEPTH:
            self.fail(pos, "E001", f"nesting is deeper than {MAX_DEPTH} levels")
            return None
        if isinstance(node, CommentedSet):
            self.fail(pos, "E004", "a YAML set is not a JSON value: use a list")
            return None
        if isinstance(node, dict | list) and (tag := _bad_tag(node)) is not None:
            self.fail(pos, "E004", f"unsupported YAML tag {tag!r}")
            return None
        if isinstance(node, dict):
            return self.mapping(node, path, depth)
        if isinstance(node, list):
            return self.sequence(node, path, depth)
        return self.scalar(node, pos)

    def mapping(self, node: dict[Any, Any], path: JsonPath, depth: int) -> JSON:
        out: dict[str, JSON] = {}
        here = self.doc.values.get(path, (1, 1))
        for key, value in node.items():
            key_pos, value_pos = _entry_pos(node, key, here)
            if not isinstance(key, str) or isinstance(key, TaggedScalar):
                self.fail(
                    key_pos,
                    "E004",
                    f"mapping keys must be strings, not {_yaml_kind(key)} ({key!r}): quote it",
                )
                continue
            skey = str(key)
            sub = (*path, skey)
            self.doc.keys[sub] = key_pos
            self.doc.values[sub] = value_pos
            out[skey] = self.convert(value, sub, depth + 1, value_pos)
        return out

    def sequence(self, node: list[Any], path: JsonPath, depth: int) -> JSON:
        out: list[JSON] = []
        here = self.doc.values.get(path, (1, 1))
        for index, value in enumerate(node):
            item_pos = here
            if isinstance(node, CommentedSeq):
                try:
                    line, col = node.lc.item(index)
                    item_pos = (line + 1, col + 1)
                except (KeyError, TypeError, IndexError):
                    pass
            sub = (*path, index)
            self.doc.values[sub] = item_pos
            out.append(self.convert(value, sub, depth + 1, item_pos))
        return out

    def scalar(self, node: Any, pos: Position) -> JSON:
        if node is None:
            return None
        if isinstance(node, TaggedScalar):
            tag = _bad_tag(node) or ""
            if tag == _STD_TAG + "str" or tag == "":
                return str(node.value)
            self.fail(pos, "E004", f"unsupported YAML tag {tag!r}")
            return None
        if isinstance(node, bool) or type(node).__name__ == "ScalarBoolean":
            return bool(node)
        if isinstance(node, int):
            return int(node)
        if isinstance(node, float):
            number = float(node)
            if not math.isfinite(number):
                self.fail(pos, "E004", f"{node!r} is not a JSON number")
                return None
            return number
        if isinstance(node, str):
            return str(node)
        if isinstance(node, bytes):
            self.fail(pos, "E004", "binary data is not a JSON value")
            return None
        if hasattr(node, "isoformat"):
            self.fail(
                pos,
                "E004",
                f"the date/time {node!s} is not a JSON value: quote it to keep it as a string",
            )
            return None
        self.fail(pos, "E004", f"unsupported YAML value of type {type(node).__name__}")
        return None


def _entry_pos(node: dict[Any, Any], key: Any, fallback: Position) -> tuple[Position, Position]:
    """(key position, value position) of ``key`` in ``node``, looking into merged maps."""
    for source in _merge_chain(node):
        lc = getattr(source, "lc", None)
        if lc is None:
            continue
        try:
            kl, kc = lc.key(key)
            vl, vc = lc.value(key)
        except (KeyError, TypeError):
            continue
        key_pos = (kl + 1, kc + 1)
        value_pos = (vl + 1, vc + 1)
        if value_pos < key_pos:  # an alias: ruamel reports the anchor's position
            value_pos = key_pos
        return key_pos, value_pos
    return fallback, fallback


def _merge_chain(node: dict[Any, Any]) -> list[Any]:
    """``node`` then the maps merged into it (``<<``), depth first, each once."""
    out: list[Any] = []
    seen: set[int] = set()
    stack = [node]
    while stack and len(out) < 1000:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        out.append(current)
        merged = getattr(current, "merge", None) if isinstance(current, CommentedMap) else None
        if merged:
            maps = [m[1] if isinstance(m, tuple) else m for m in merged]
            stack.extend(reversed([m for m in maps if isinstance(m, dict)]))
    return out

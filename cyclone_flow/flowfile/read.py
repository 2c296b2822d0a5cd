"""Read a flow file's YAML into plain JSON data, remembering where every key and value is.

The YAML events come from libyaml's C parser (the one PyYAML ships); when libyaml rejects
a file of up to :data:`RUAMEL_FALLBACK_MAX_CHARS`, or is not installed, ruamel.yaml's
pure-Python parser reads it, so a file means what ruamel.yaml says it means (YAML 1.2 by
default), and a YAML syntax error is reported as ruamel.yaml words it. A larger file that
libyaml rejects gets libyaml's own error, at libyaml's position (reading it again in pure
Python would take seconds). This module composes the events itself, keeping 1-based
positions for the problems, and stops as soon as the document grows past
:data:`MAX_VALUES` values or :data:`MAX_DEPTH` levels (an alias bomb or a huge file is
never expanded). Scalars are resolved and constructed as ruamel.yaml's round-trip loader
does. Anchors, aliases and merge keys (``<<: *base``) are expanded. Values that JSON
cannot hold are rejected (code E004) rather than converted: timestamps (``2024-01-01``:
quote it), sets, ordered maps and pairs, binary, NaN and infinities, custom tags, and
mapping keys that are not strings.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml import events as _events
from ruamel.yaml.comments import CommentedSet, TaggedScalar
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.resolver import implicit_resolvers
from ruamel.yaml.scanner import Scanner, ScannerError

from cyclone_flow.errors import Problem, shown
from cyclone_flow.flowfile.model import JSON

_event_modules: list[Any] = [_events]
try:  # libyaml's reader, scanner and parser in C, as PyYAML ships them
    from yaml import events as _libyaml_events
    from yaml._yaml import CParser as _CParser

    _event_modules.append(_libyaml_events)
except ImportError:  # pragma: no cover - PyYAML without libyaml, or no PyYAML
    _CParser = None

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_VALUES",
    "RUAMEL_FALLBACK_MAX_CHARS",
    "YAML_PARSER",
    "Document",
    "JsonPath",
    "parse_yaml",
    "read_text",
]

MAX_DEPTH = 100
"""Deepest nesting of mappings and lists accepted (E001 beyond)."""

MAX_VALUES = 200_000
"""Most values accepted after expanding aliases (E001 beyond; counted while the YAML is
read, so an alias bomb or a huge file stops there)."""

MAX_FILE_BYTES = 2 * 1024 * 1024
"""Largest flow file read (E000 beyond): checked before reading, and at most one byte
more is ever read, so a device or pipe cannot exhaust memory."""

RUAMEL_FALLBACK_MAX_CHARS = 256 * 1024
"""Largest text that ruamel.yaml's pure-Python parser reads again when libyaml rejects it
(about a second at most); above it, libyaml's error is reported."""

YAML_PARSER = "libyaml" if _CParser is not None else "pure"
"""The YAML parser :func:`parse_yaml` tries first: ``"libyaml"`` (C) or ``"pure"``."""

JsonPath = tuple[str | int, ...]
Position = tuple[int, int]

_STD_TAG = "tag:yaml.org,2002:"
_STR = _STD_TAG + "str"
_NULL = _STD_TAG + "null"
_BOOL = _STD_TAG + "bool"
_INT = _STD_TAG + "int"
_FLOAT = _STD_TAG + "float"
_MERGE = _STD_TAG + "merge"
_DECIMAL = re.compile(r"[-+]?[0-9]+")  # leading zeros too: YAML 1.2 reads 007 as 7
_SIMPLE_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_BOOLS = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False}

# libyaml ends lines at these too; ruamel.yaml (YAML 1.2) does not
_LINE_BREAKS_1_1 = re.compile("[\x85\u2028\u2029]")
_SCALAR, _SEQ, _MAP = 0, 1, 2
(_SCALAR_EV, _MAP_START, _SEQ_START, _END, _ALIAS, _DOC_START, _STREAM_END, _OTHER) = range(8)
_EVENT_KINDS: dict[type, int] = {}
for _module in _event_modules:
    for _name, _kind in (
        ("ScalarEvent", _SCALAR_EV),
        ("MappingStartEvent", _MAP_START),
        ("SequenceStartEvent", _SEQ_START),
        ("MappingEndEvent", _END),
        ("SequenceEndEvent", _END),
        ("AliasEvent", _ALIAS),
        ("DocumentStartEvent", _DOC_START),
        ("StreamEndEvent", _STREAM_END),
        ("StreamStartEvent", _OTHER),
        ("DocumentEndEvent", _OTHER),
    ):
        _EVENT_KINDS[getattr(_module, _name)] = _kind
del _module, _name, _kind
_KIND_NAMES = ("scalar", "sequence", "mapping")
_SCALAR_TAGS = frozenset(
    _STD_TAG + t for t in ("null", "bool", "int", "float", "binary", "timestamp", "str")
)
_COLLECTION_TAGS = {_STD_TAG + "seq": "sequence", _STD_TAG + "map": "mapping"}
_COLLECTION_TAGS[_STD_TAG + "set"] = "mapping"
_UNSUPPORTED_TAGS = frozenset((_STD_TAG + "omap", _STD_TAG + "pairs"))


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
    text: str = field(default="", repr=False)
    """The file's text (for positions inside a scalar: :meth:`inner_pos`)."""

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

    def inner_pos(self, path: Iterable[str | int], offset: int) -> Position:
        """Position of character ``offset`` of the string at ``path`` when it is written on
        one line (plain or quoted, without escapes before ``offset``); else the position of
        the value."""
        line, col = self.value_pos(path)
        lines = self.text.splitlines()
        if not 0 < line <= len(lines) or col > len(lines[line - 1]):
            return line, col
        first = lines[line - 1][col - 1]
        if first in "|>":
            return line, col
        return line, col + offset + (1 if first in "'\"" else 0)

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
    return Problem(
        path,
        1,
        1,
        "E000",
        f"file is {size}, over the {shown} limit for a flow file "
        "(pass large data as the run input instead)",
    )


def parse_yaml(
    text: str, path: str = "<string>", *, pure: bool = False
) -> tuple[Document | None, list[Problem]]:
    """Parse one YAML document into a :class:`Document`.

    Returns ``(document, [])`` on success, else ``(None, problems)`` with codes E001 (YAML
    syntax, too deep, too large), E002 (duplicate key), E004 (a value JSON cannot hold) or
    E005 (empty file, or a top level that is not a mapping). Never raises for bad text.
    ``pure=True`` skips libyaml and reads with ruamel.yaml's Python parser only.
    """
    if not pure and _CParser is not None and not _LINE_BREAKS_1_1.search(text):
        try:
            return _parse(text, path, _libyaml_events_of(text))
        except _LibyamlFailed as failed:
            # ruamel.yaml accepts some YAML 1.2 that libyaml does not, and words errors;
            # in pure Python, at about 5 s per MiB: only for a file of a moderate size
            if len(text) > RUAMEL_FALLBACK_MAX_CHARS:
                return None, [_libyaml_problem(path, text, failed.error)]
    yaml = YAML(typ="safe", pure=True)
    yaml.Scanner = _Scanner
    return _parse(text, path, yaml.parse(text))


class _LibyamlFailed(Exception):
    """libyaml stopped on the text (``error``: what it raised)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _libyaml_events_of(text: str) -> Iterator[Any]:
    try:
        get = _CParser(text).get_event
        while True:
            event = get()
            yield event
            if _EVENT_KINDS.get(type(event)) == _STREAM_END:
                return
    except Exception as exc:
        raise _LibyamlFailed(exc) from exc


def _libyaml_problem(path: str, text: str, error: Exception) -> Problem:
    """E001 for what libyaml raised, at its position: a marked error (scanner, parser)
    at its problem mark, a reader error (a character YAML does not allow) at its byte
    offset."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is not None:
        context, problem = getattr(error, "context", None), getattr(error, "problem", None)
        message = " ".join(s for s in (context, problem) if s) or "invalid YAML"
        return Problem(
            path, mark.line + 1, mark.column + 1, "E001", f"YAML syntax error: {message}"
        )
    position = getattr(error, "position", None)
    if isinstance(position, int):  # a byte offset into the UTF-8 text
        chars = len(text.encode("utf-8")[:position].decode("utf-8", "ignore"))
        line, col = _offset_pos(text, chars)
        reason = getattr(error, "reason", None) or "invalid character"
        return Problem(path, line, col, "E001", f"YAML syntax error: {reason}")
    return Problem(path, 1, 1, "E001", f"YAML syntax error: {error}")


class _Scanner(Scanner):
    """ruamel.yaml's scanner, but an escape that is no Unicode character (``"\\UFFFFFFFF"``)
    is a :class:`ScannerError` at the escape, not a bare OverflowError or ValueError."""

    def scan_flow_scalar_non_spaces(self, double: Any, start_mark: Any) -> Any:
        try:
            return super().scan_flow_scalar_non_spaces(double, start_mark)
        except (OverflowError, ValueError):
            reader = self.reader
            letter = reader.peek(-1)  # the escape's letter, its hex digits next
            digits = reader.prefix(self.ESCAPE_CODES.get(letter, 8))
            raise ScannerError(
                "while scanning a double-quoted scalar",
                start_mark,
                f"found the escape \\{letter}{digits}, which is no Unicode character (the "
                "largest is \\U0010FFFF)",
                reader.get_mark(),
            ) from None


def _parse(text: str, path: str, events: Iterator[Any]) -> tuple[Document | None, list[Problem]]:
    composer = _Composer(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            root = composer.compose(events)
    except _Stop as stop:
        return None, [stop.problem]
    except _LibyamlFailed:
        raise
    except MarkedYAMLError as exc:
        message = " ".join(s for s in (exc.context, exc.problem) if s) or "invalid YAML"
        return None, [_marked(path, exc, "E001", f"YAML syntax error: {message}")]
    except ReaderError as exc:
        line, col = _offset_pos(text, exc.position)
        return None, [Problem(path, line, col, "E001", f"YAML syntax error: {exc.reason}")]
    except RecursionError:
        return None, [Problem(path, 1, 1, "E001", "YAML nesting is too deep")]
    except (YAMLError, Exception) as exc:  # the parser may raise plain errors on odd input
        return None, [Problem(path, 1, 1, "E001", f"cannot parse YAML: {exc}")]
    if composer.deferred is not None:
        return None, [composer.deferred]

    doc = Document(path, None, text=text)
    if root is None or (root.kind == _SCALAR and root.value is None):
        return None, [doc.problem((1, 1), "E005", "the file is empty: expected a flow mapping")]
    if root.kind != _MAP:
        kind = "a list" if root.kind == _SEQ else _yaml_kind(root.value)
        return None, [
            doc.problem(
                (1, 1),
                "E005",
                f"the top level must be a mapping (name:, nodes:, ...), not {kind}",
            )
        ]
    converter = _Converter(doc)
    doc.values[()] = root.pos
    doc.data = converter.convert(root, (), root.pos)
    if converter.problems:
        return None, converter.problems
    return doc, []


_TAG_KINDS = {
    _INT: "an integer",
    _FLOAT: "a number",
    _BOOL: "a boolean",
    _NULL: "null",
    _STD_TAG + "timestamp": "a date/time",
}


def _unreadable(tag: str, value: str) -> str:
    """Why the scalar ``value`` tagged ``tag`` is no JSON value (it does not read as what
    its tag says)."""
    short = "!!" + tag.removeprefix(_STD_TAG) if tag.startswith(_STD_TAG) else tag
    kind = _TAG_KINDS.get(tag)
    if kind is None:
        return f"{shown(value)} cannot be read as {short}: not a JSON value"
    message = f"{shown(value)} is not {kind} (its tag is {short}): not a JSON value"
    if tag == _STD_TAG + "timestamp":
        message += "; quote a date/time to keep it as a string"
    return message


def _marked(path: str, exc: MarkedYAMLError, code: str, message: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    if mark is None:
        return Problem(path, 1, 1, code, message)
    return Problem(path, mark.line + 1, mark.column + 1, code, message)


def _offset_pos(text: str, offset: int) -> Position:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


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


class _Stop(Exception):
    """Reading stops at once with this problem (too deep, too large, a bad alias)."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class _Node:
    """One composed YAML node. ``value``: the constructed scalar (a Python object, see
    :meth:`_Composer.scalar`), the item nodes of a sequence, or the ``(key, value)`` node
    pairs of a mapping with merged-in pairs last. ``size`` counts the values it expands
    to, ``height`` how much deeper its deepest value is (0 for a scalar or an empty
    collection); ``bad`` is an E004 ``(code, message)`` found in its tag."""

    __slots__ = ("bad", "height", "key", "kind", "pos", "size", "tag", "value")

    def __init__(self, kind: int, value: Any, pos: Position, tag: str | None) -> None:
        self.kind = kind
        self.value = value
        self.pos = pos
        self.tag = tag
        self.size = 1
        self.height = 0
        self.bad: tuple[str, str] | None = None
        self.key: Any = None  # a mapping key's identity, to find duplicates


class _Frame:
    """A sequence or mapping being composed."""

    __slots__ = ("anchor", "height", "is_map", "keys", "merge", "node", "pending", "start_total")

    def __init__(self, node: _Node, anchor: str | None, start_total: int) -> None:
        self.node = node
        self.is_map = node.kind == _MAP
        self.anchor = anchor
        self.start_total = start_total
        self.height = 0
        self.pending: _Node | None = None  # a mapping's key waiting for its value
        self.keys: set[Any] = set()
        self.merge: _Node | None = None


class _ScalarLoader:
    """The loader ruamel's round-trip constructor asks for the YAML version in use."""

    comment_handling = None

    def __init__(self, version: tuple[int, int]) -> None:
        self._resolver = self
        self.processing_version = version


class _Composer:
    """YAML events -> a tree of :class:`_Node`, checking depth, size, aliases, duplicate
    keys and merge keys as it goes.

    Depth, size and alias problems raise :class:`_Stop` at once; a duplicate key or a
    value ruamel cannot construct is kept in :attr:`deferred` (the first one) while
    composing goes on, so that a YAML syntax error further down wins, as it did when the
    whole file was parsed before being constructed.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.total = 0
        self.deferred: Problem | None = None
        self.anchors: dict[str, _Node] = {}
        self.open_anchors: set[str] = set()
        self.stack: list[_Frame] = []
        self.root: _Node | None = None
        self._set_version((1, 2))

    def _set_version(self, version: tuple[int, int]) -> None:
        self.version = version
        table: dict[str, list[tuple[str, Any]]] = {}
        for versions, tag, regexp, first in implicit_resolvers:
            if version in versions:
                match = regexp.lazy_self().match  # ruamel compiles it lazily
                for ch in first:
                    table.setdefault(ch, []).append((tag, match))
        self.resolvers = table
        self.constructor = RoundTripConstructor(loader=_ScalarLoader(version))

    def stop(self, pos: Position, message: str) -> _Stop:
        return _Stop(Problem(self.path, pos[0], pos[1], "E001", message))

    def defer(self, pos: Position, code: str, message: str) -> None:
        if self.deferred is None:
            self.deferred = Problem(self.path, pos[0], pos[1], code, message)

    def compose(self, events: Iterator[Any]) -> _Node | None:
        """The root node of the stream's single document (``None``: no document)."""
        documents = 0
        kinds = _EVENT_KINDS
        for event in events:
            kind = kinds.get(type(event), _OTHER)
            if kind == _SCALAR_EV:
                self.add(self.scalar(event))
            elif kind == _END:
                self.end()
            elif kind == _MAP_START:
                self.start(event, _MAP)
            elif kind == _SEQ_START:
                self.start(event, _SEQ)
            elif kind == _ALIAS:
                self.alias(event)
            elif kind == _DOC_START:
                documents += 1
                if documents > 1:
                    raise MarkedYAMLError(
                        "expected a single document in the stream",
                        None,
                        "but found another document",
                        event.start_mark,
                    )
                version = event.version
                if version is not None and tuple(version) != self.version:
                    self._set_version((1, 1) if tuple(version) == (1, 1) else (1, 2))
            elif kind == _STREAM_END:
                break
        return self.root

    def count(self, pos: Position, values: int) -> None:
        """Add ``values`` values that start at ``pos`` to the document's total."""
        self.total += values
        if self.total > MAX_VALUES:
            raise self.stop(pos, f"the document expands to more than {MAX_VALUES} values")

    def in_key(self) -> bool:
        """True when the next node is a mapping's key (a key that is a scalar is not a
        value: it is not counted)."""
        if not self.stack:
            return False
        top = self.stack[-1]
        return top.is_map and top.pending is None

    def scalar(self, event: Any) -> _Node:
        mark = event.start_mark
        pos = (mark.line + 1, mark.column + 1)
        stack = self.stack
        if not stack or stack[-1].pending is not None or not stack[-1].is_map:  # a value
            if len(stack) > MAX_DEPTH:
                raise self.stop(pos, f"nesting is deeper than {MAX_DEPTH} levels")
            self.total += 1
            if self.total > MAX_VALUES:
                raise self.stop(pos, f"the document expands to more than {MAX_VALUES} values")
        value: str = event.value
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolve(value) if event.implicit[0] else _STR
        if tag == _STR:
            obj: Any = value
        elif tag == _NULL:
            obj = None
        elif tag == _BOOL and value.lower() in _BOOLS:
            obj = _BOOLS[value.lower()]
        elif tag == _INT and self.version == (1, 2) and _DECIMAL.fullmatch(value):
            obj = int(value)
        elif tag == _FLOAT and _SIMPLE_FLOAT.fullmatch(value):
            obj = float(value)
        else:
            obj = self.construct(tag, event)
        node = _Node(_SCALAR, obj, pos, tag)
        if event.anchor is not None:
            self.anchors[event.anchor] = node
        return node

    def resolve(self, value: str) -> str:
        """The tag ruamel.yaml resolves the plain scalar ``value`` to."""
        for tag, match in self.resolvers.get(value[:1], ()):
            if match(value):
                return tag
        return _STR

    def construct(self, tag: str, event: Any) -> Any:
        """A scalar as ruamel.yaml's round-trip constructor builds it (tags, timestamps,
        binary, unusual numbers); a failure is deferred and gives ``None``."""
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        try:
            return self.constructor.construct_object(node, deep=True)
        except Exception as exc:
            if isinstance(exc, MarkedYAMLError) and tag not in _TAG_KINDS:  # binary, ...
                message = " ".join(s for s in (exc.context, exc.problem) if s) or "invalid YAML"
                problem = _marked(self.path, exc, "E001", f"YAML syntax error: {message}")
            else:  # the constructor's own error (an IndexError, ...) says nothing
                mark = event.start_mark
                pos = (mark.line + 1, mark.column + 1)
                problem = Problem(self.path, *pos, "E004", _unreadable(tag, event.value))
        if self.deferred is None:
            self.deferred = problem
        return None

    def start(self, event: Any, kind: int) -> None:
        mark = event.start_mark
        pos = (mark.line + 1, mark.column + 1)
        if len(self.stack) > MAX_DEPTH:
            raise self.stop(pos, f"nesting is deeper than {MAX_DEPTH} levels")
        start_total = self.total
        self.count(pos, 1)
        tag = event.tag
        node = _Node(kind, [], pos, None if tag in (None, "!") else tag)
        anchor = event.anchor
        if anchor is not None:
            self.open_anchors.add(anchor)
        self.stack.append(_Frame(node, anchor, start_total))

    def end(self) -> None:
        frame = self.stack.pop()
        node = frame.node
        node.size = self.total - frame.start_total
        if node.kind == _MAP and frame.merge is not None:
            self.merge(frame, frame.merge)
        node.height = frame.height + 1 if node.value else 0
        if node.tag is not None:
            self.check_tag(node)
        if frame.anchor is not None:
            self.open_anchors.discard(frame.anchor)
            self.anchors[frame.anchor] = node
        self.add(node)

    def alias(self, event: Any) -> None:
        mark = event.start_mark
        pos = (mark.line + 1, mark.column + 1)
        name = event.anchor
        node = self.anchors.get(name)
        if node is None:
            if name in self.open_anchors:
                raise self.stop(pos, f"alias *{name} is inside its own anchor (a loop)")
            raise MarkedYAMLError(None, None, f"found undefined alias {name!r}", mark)
        if len(self.stack) + node.height > MAX_DEPTH:
            raise self.stop(pos, f"nesting is deeper than {MAX_DEPTH} levels")
        if node.kind != _SCALAR or not self.in_key():
            self.count(pos, node.size)
        self.add(node)

    def add(self, node: _Node) -> None:
        """Attach a finished ``node`` to the open collection (or make it the root)."""
        if not self.stack:
            self.root = node
            return
        top = self.stack[-1]
        if node.height >= top.height:
            top.height = node.height
        if not top.is_map:
            top.node.value.append(node)
            return
        key = top.pending
        if key is None:
            top.pending = node
            return
        top.pending = None
        if key.kind == _SCALAR and key.tag == _MERGE:
            if top.merge is not None:
                self.defer(key.pos, "E002", "duplicate key '<<': a mapping merges once")
            top.merge = node
            return
        ident = _identity(key)
        if ident in top.keys:
            shown = key.value if key.kind == _SCALAR else _KIND_NAMES[key.kind]
            self.defer(
                key.pos,
                "E002",
                f"duplicate key {str(shown)!r}: keys must be unique within a mapping",
            )
            return
        top.keys.add(ident)
        key.key = ident
        top.node.value.append((key, node))

    def merge(self, frame: _Frame, value: _Node) -> None:
        """Append the pairs of the mapping(s) merged with ``<<`` that are not keys yet."""
        if value.kind == _MAP:
            sources = [value]
        elif value.kind == _SEQ:
            sources = value.value
            for sub in sources:
                if sub.kind != _MAP:
                    self.defer(
                        sub.pos,
                        "E001",
                        "YAML syntax error: while constructing a mapping expected a "
                        f"mapping for merging, but found {_KIND_NAMES[sub.kind]}",
                    )
                    return
        else:
            self.defer(
                value.pos,
                "E001",
                "YAML syntax error: while constructing a mapping expected a mapping or "
                f"list of mappings for merging, but found {_KIND_NAMES[value.kind]}",
            )
            return
        pairs = frame.node.value
        keys = frame.keys
        for source in sources:
            for key, item in source.value:
                if key.key not in keys:
                    keys.add(key.key)
                    pairs.append((key, item))

    def check_tag(self, node: _Node) -> None:
        """E004 for a set or custom tag on a collection; E001 for a tag of another kind."""
        tag = node.tag or ""
        kind = node.kind
        if tag == _STD_TAG + ("map" if kind == _MAP else "seq"):
            return
        if kind == _MAP and tag == _STD_TAG + "set":
            node.bad = ("E004", "a YAML set is not a JSON value: use a list")
        elif not tag.startswith(_STD_TAG) or tag in _UNSUPPORTED_TAGS:
            node.bad = ("E004", f"unsupported YAML tag {tag!r}")
        elif tag in _SCALAR_TAGS or tag in _COLLECTION_TAGS:
            wanted = _COLLECTION_TAGS.get(tag, "scalar")
            self.defer(
                node.pos,
                "E001",
                f"YAML syntax error: expected a {wanted} node, but found {_KIND_NAMES[kind]}",
            )
        # any other tag:yaml.org,2002: tag on a collection reads as the collection


def _identity(key: _Node) -> Any:
    """What makes two mapping keys the same key (their values, compared as Python does)."""
    if key.kind == _SCALAR:
        if type(key.value) is str:
            return key.value
        try:
            hash(key.value)
        except TypeError:
            return ("unhashable", id(key))
        return key.value
    if key.kind == _SEQ:
        return ("seq", tuple(_identity(item) for item in key.value))
    return ("map", tuple((_identity(k), _identity(v)) for k, v in key.value))


class _Converter:
    """Composed nodes -> plain JSON, filling the document's positions; collects E004."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.values = doc.values
        self.keys = doc.keys
        self.problems: list[Problem] = []

    def fail(self, pos: Position, code: str, message: str) -> None:
        self.problems.append(self.doc.problem(pos, code, message))

    def convert(self, node: _Node, path: JsonPath, pos: Position) -> JSON:
        if node.bad is not None:
            self.fail(pos, *node.bad)
            return None
        kind = node.kind
        if kind == _MAP:
            out: dict[str, JSON] = {}
            values, keys = self.values, self.keys
            for key, value in node.value:
                key_pos = key.pos
                name = key.value
                if key.kind != _SCALAR or not isinstance(name, str):
                    self.bad_key(key)
                    continue
                name = str(name)
                sub = (*path, name)
                value_pos = value.pos
                if value_pos < key_pos:  # an alias: its anchor is written before the key
                    value_pos = key_pos
                keys[sub] = key_pos
                values[sub] = value_pos
                item = value.value
                if value.kind == _SCALAR and value.bad is None and type(item) is str:
                    out[name] = item
                else:
                    out[name] = self.convert(value, sub, value_pos)
            return out
        if kind == _SEQ:
            items: list[JSON] = []
            for index, value in enumerate(node.value):
                sub = (*path, index)
                self.values[sub] = value.pos
                items.append(self.convert(value, sub, value.pos))
            return items
        return self.scalar(node.value, pos)

    def bad_key(self, key: _Node) -> None:
        shown = "a list" if key.kind == _SEQ else "a mapping"
        if key.kind == _SCALAR:
            shown = f"{_yaml_kind(key.value)} ({key.value!r})"
        self.fail(key.pos, "E004", f"mapping keys must be strings, not {shown}: quote it")

    def scalar(self, node: Any, pos: Position) -> JSON:
        kind = type(node)
        if node is None or kind is str or kind is int or kind is bool:
            return node
        if isinstance(node, TaggedScalar):
            tag = _bad_tag(node) or ""
            if tag == _STD_TAG + "str" or tag == "":
                return str(node.value)
            self.fail(pos, "E004", f"unsupported YAML tag {tag!r}")
            return None
        if isinstance(node, CommentedSet):
            self.fail(pos, "E004", "a YAML set is not a JSON value: use a list")
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

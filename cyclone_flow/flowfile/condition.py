"""``when:`` conditions: a small, safe boolean expression language (never Python ``eval``).

A node's ``when:`` decides, in the transaction that would make the node available (or
start it), whether it runs or goes to the terminal state ``skipped``. The expression is
parsed by a hand-written tokenizer and recursive-descent parser; lint reports syntax
errors at their line:col inside the flow file (E018) and references to nodes that are
not ancestors (E019).

Grammar (the whole expression may be wrapped in one ``${{ ... }}``)::

    expr    := or
    or      := and ("or" and)*
    and     := not ("and" not)*
    not     := "not" not | compare
    compare := operand (OP operand)?        OP: == != < <= > >= in, "not in"
    operand := literal | reference | "(" expr ")" | "[" [expr ("," expr)*] "]"
    literal := number | 'string' | "string" | true | false | null
    reference := run.input[.SEG]* | nodes.NAME.output[.SEG]* | ${{ <either> }}

References are parsed by :func:`cyclone_flow.flowfile.template.parse_ref` (``item`` is
not allowed). Evaluation:

- a reference whose key or index does not exist, or that walks through a null, is
  ``null`` (no error); the output of a skipped node is ``null``;
- ``==`` / ``!=`` compare JSON values (``true`` is not ``1``);
- ``<`` ``<=`` ``>`` ``>=`` compare two numbers or two strings; with a ``null`` side
  they are false; other type pairs raise :class:`ConditionError`;
- ``a in b``: ``b`` a list (an element equal to ``a``), a string (``a`` a substring),
  a mapping (``a`` a key); ``null`` is false; other types raise;
- ``and`` / ``or`` / ``not`` and the final result use JSON truthiness (``null``,
  ``false``, ``0``, ``""``, ``[]``, ``{}`` are false).

>>> parse_condition("run.input.amount > 100 and nodes.check.output.ok").evaluate(
...     {"amount": 150}, lambda n: {"ok": True})
(True, {'run.input.amount': 150, 'nodes.check.output.ok': True})
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cyclone_flow._json import JSON
from cyclone_flow.errors import TemplateError
from cyclone_flow.flowfile.template import MARKER, Ref, parse_ref

__all__ = [
    "Condition",
    "ConditionError",
    "ConditionSyntaxError",
    "parse_condition",
]


class ConditionSyntaxError(ValueError):
    """A ``when:`` expression that does not parse; ``offset`` is the 0-based character
    offset of the problem in the expression text."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


class ConditionError(TemplateError):
    """A ``when:`` expression that cannot be evaluated against a run's data (e.g. ``<``
    between a string and a number): the node is discarded with this message."""


# -- tokens --------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<ref>\$\{\{[^{}]*?\}\})
  | (?P<number>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<op>==|!=|<=|>=|<|>|\(|\)|\[|\]|,)
  | (?P<path>[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*)
    """,
    re.VERBOSE,
)
_WORDS = {"and", "or", "not", "in", "true", "false", "null"}
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"'}


@dataclass(frozen=True)
class _Tok:
    kind: str  # ref, number, string, op, word, path, end
    text: str
    offset: int


def _tokens(text: str, base: int) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            ch = text[pos]
            if text.startswith(MARKER, pos):
                raise ConditionSyntaxError("unclosed '${{' (expected '}}')", base + pos)
            if ch in "'\"":
                raise ConditionSyntaxError("unterminated string", base + pos)
            if ch == "=":
                raise ConditionSyntaxError("'=' is not an operator: use '=='", base + pos)
            raise ConditionSyntaxError(f"unexpected character {ch!r}", base + pos)
        kind = m.lastgroup or ""
        if kind != "ws":
            word = m.group()
            if kind == "path" and word in _WORDS:
                kind = "word"
            out.append(_Tok(kind, word, base + pos))
        pos = m.end()
    out.append(_Tok("end", "", base + len(text)))
    return out


# -- the tree ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Lit:
    value: JSON
    offset: int


@dataclass(frozen=True)
class _RefNode:
    ref: Ref
    offset: int


@dataclass(frozen=True)
class _List:
    items: tuple[_Expr, ...]
    offset: int


@dataclass(frozen=True)
class _Not:
    operand: _Expr
    offset: int


@dataclass(frozen=True)
class _Bool:
    op: str  # and, or
    left: _Expr
    right: _Expr
    offset: int


@dataclass(frozen=True)
class _Cmp:
    op: str  # == != < <= > >= in "not in"
    left: _Expr
    right: _Expr
    offset: int


_Expr = _Lit | _RefNode | _List | _Not | _Bool | _Cmp

_COMPARE = {"==", "!=", "<", "<=", ">", ">="}
_ORDER: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class _Parser:
    def __init__(self, tokens: list[_Tok]) -> None:
        self.tokens = tokens
        self.i = 0

    @property
    def tok(self) -> _Tok:
        return self.tokens[self.i]

    def take(self) -> _Tok:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def at(self, kind: str, text: str | None = None) -> bool:
        tok = self.tok
        return tok.kind == kind and (text is None or tok.text == text)

    def fail(self, expected: str) -> ConditionSyntaxError:
        tok = self.tok
        found = "the end of the expression" if tok.kind == "end" else repr(tok.text)
        return ConditionSyntaxError(f"expected {expected}, found {found}", tok.offset)

    def parse(self) -> _Expr:
        if self.at("end"):
            raise self.fail("an expression")
        expr = self.or_()
        if not self.at("end"):
            raise self.fail("'and', 'or' or the end of the expression")
        return expr

    def or_(self) -> _Expr:
        left = self.and_()
        while self.at("word", "or"):
            tok = self.take()
            left = _Bool("or", left, self.and_(), tok.offset)
        return left

    def and_(self) -> _Expr:
        left = self.not_()
        while self.at("word", "and"):
            tok = self.take()
            left = _Bool("and", left, self.not_(), tok.offset)
        return left

    def not_(self) -> _Expr:
        if self.at("word", "not"):
            tok = self.take()
            return _Not(self.not_(), tok.offset)
        return self.compare()

    def compare(self) -> _Expr:
        left = self.operand()
        tok = self.tok
        if tok.kind == "op" and tok.text in _COMPARE:
            self.take()
            return _Cmp(tok.text, left, self.operand(), tok.offset)
        if self.at("word", "in"):
            self.take()
            return _Cmp("in", left, self.operand(), tok.offset)
        if self.at("word", "not"):
            self.take()
            if not self.at("word", "in"):
                raise self.fail("'in' after 'not' (as in 'a not in b')")
            self.take()
            return _Cmp("not in", left, self.operand(), tok.offset)
        return left

    def operand(self) -> _Expr:
        tok = self.tok
        if tok.kind == "number":
            self.take()
            number = float(tok.text)
            is_int = re.fullmatch(r"-?\d+", tok.text) is not None
            return _Lit(int(tok.text) if is_int else number, tok.offset)
        if tok.kind == "string":
            self.take()
            return _Lit(_unquote(tok.text, tok.offset), tok.offset)
        if tok.kind == "word" and tok.text in ("true", "false", "null"):
            self.take()
            return _Lit({"true": True, "false": False, "null": None}[tok.text], tok.offset)
        if tok.kind in ("path", "ref"):
            self.take()
            return _RefNode(_reference(tok), tok.offset)
        if self.at("op", "("):
            self.take()
            inner = self.or_()
            if not self.at("op", ")"):
                raise self.fail("')'")
            self.take()
            return inner
        if self.at("op", "["):
            self.take()
            items: list[_Expr] = []
            if not self.at("op", "]"):
                items.append(self.or_())
                while self.at("op", ","):
                    self.take()
                    items.append(self.or_())
            if not self.at("op", "]"):
                raise self.fail("',' or ']'")
            self.take()
            return _List(tuple(items), tok.offset)
        raise self.fail("a value (a number, a string, true, false, null, a list, a reference)")


def _unquote(text: str, offset: int) -> str:
    body = text[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise ConditionSyntaxError(f"unknown escape '\\{nxt}' in a string", offset + i + 1)
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _reference(tok: _Tok) -> Ref:
    text = tok.text if tok.kind == "ref" else f"${{{{ {tok.text} }}}}"
    try:
        ref = parse_ref(text)
    except TemplateError:
        raise ConditionSyntaxError(
            f"{tok.text!r} is not a reference: expected 'run.input[.key...]' or "
            "'nodes.NAME.output[.key...]' (or a quoted string)",
            tok.offset,
        ) from None
    if ref is None or ref.kind == "item":
        raise ConditionSyntaxError(
            f"{tok.text!r}: 'item' is not allowed in when: (the condition decides the "
            "whole node, before any item exists)",
            tok.offset,
        )
    return ref


# -- evaluation ----------------------------------------------------------------------------


def _truthy(value: JSON) -> bool:
    if value is None or value is False:
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str | list | dict):
        return len(value) > 0
    return True


def _kind(value: JSON) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "mapping"


def _equal(a: JSON, b: JSON) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if _kind(a) != _kind(b):
        return False
    return bool(a == b)


def _walk(value: JSON, path: tuple[str, ...]) -> JSON:
    for seg in path:
        if isinstance(value, dict):
            value = value.get(seg)
        elif isinstance(value, list) and seg.isdigit() and int(seg) < len(value):
            value = value[int(seg)]
        else:
            return None
    return value


@dataclass(frozen=True)
class Condition:
    """A parsed ``when:`` expression; ``text`` as written."""

    text: str
    tree: _Expr

    def references(self) -> list[tuple[Ref, int]]:
        """Every reference with its 0-based offset in :attr:`text`, in order."""
        return list(_refs(self.tree))

    def nodes(self) -> list[str]:
        """The node names the expression reads, each once, in order."""
        names: list[str] = []
        for ref, _ in self.references():
            if ref.node is not None and ref.node not in names:
                names.append(ref.node)
        return names

    def evaluate(
        self, run_input: JSON, upstream: Callable[[str], JSON]
    ) -> tuple[bool, dict[str, JSON]]:
        """``(result, values)``: whether the node runs, and the value of each reference
        (by its normalised expression) as read. ``upstream(name)`` returns that node's
        output (None for a skipped node). Raises ConditionError."""
        values: dict[str, JSON] = {}
        outputs: dict[str, JSON] = {}

        def read(ref: Ref) -> JSON:
            if ref.kind == "run":
                root = run_input
            else:
                name = ref.node or ""
                if name not in outputs:
                    outputs[name] = upstream(name)
                root = outputs[name]
            value = _walk(root, ref.path)
            values[ref.expression] = value
            return value

        return _truthy(_eval(self.tree, read, self.text)), values


def _refs(expr: _Expr) -> Iterator[tuple[Ref, int]]:
    if isinstance(expr, _RefNode):
        yield expr.ref, expr.offset
    elif isinstance(expr, _List):
        for item in expr.items:
            yield from _refs(item)
    elif isinstance(expr, _Not):
        yield from _refs(expr.operand)
    elif isinstance(expr, _Bool | _Cmp):
        yield from _refs(expr.left)
        yield from _refs(expr.right)


def _eval(expr: _Expr, read: Callable[[Ref], JSON], text: str) -> JSON:
    if isinstance(expr, _Lit):
        return expr.value
    if isinstance(expr, _RefNode):
        return read(expr.ref)
    if isinstance(expr, _List):
        return [_eval(item, read, text) for item in expr.items]
    if isinstance(expr, _Not):
        return not _truthy(_eval(expr.operand, read, text))
    if isinstance(expr, _Bool):
        left = _truthy(_eval(expr.left, read, text))
        if expr.op == "and":
            return left and _truthy(_eval(expr.right, read, text))
        return left or _truthy(_eval(expr.right, read, text))
    left, right = _eval(expr.left, read, text), _eval(expr.right, read, text)
    return _compare(expr.op, left, right, text, expr.offset)


def _compare(op: str, a: JSON, b: JSON, text: str, offset: int) -> bool:
    if op == "==":
        return _equal(a, b)
    if op == "!=":
        return not _equal(a, b)
    if op in ("in", "not in"):
        found = _contains(b, a, text, offset)
        return found if op == "in" else not found
    if a is None or b is None:
        return False
    ka, kb = _kind(a), _kind(b)
    if ka != kb or ka not in ("number", "string"):
        raise ConditionError(
            f"when: {text!r}: cannot compare a {ka} with a {kb} using {op!r} "
            f"(at character {offset + 1}; both sides must be numbers or both strings)"
        )
    return bool(_ORDER[op](a, b))


def _contains(container: JSON, item: JSON, text: str, offset: int) -> bool:
    if container is None:
        return False
    if isinstance(container, list):
        return any(_equal(item, x) for x in container)
    if isinstance(container, dict):
        return isinstance(item, str) and item in container
    if isinstance(container, str):
        if item is None:
            return False
        if not isinstance(item, str):
            raise ConditionError(
                f"when: {text!r}: 'in' a string needs a string on its left, not a "
                f"{_kind(item)} (at character {offset + 1})"
            )
        return item in container
    raise ConditionError(
        f"when: {text!r}: 'in' needs a list, a string or a mapping on its right, not a "
        f"{_kind(container)} (at character {offset + 1})"
    )


# -- parsing -------------------------------------------------------------------------------

_WRAPPED = re.compile(r"^\s*\$\{\{(?P<inner>.*)\}\}\s*$", re.DOTALL)


@lru_cache(maxsize=1024)
def parse_condition(text: str) -> Condition:
    """Parse a ``when:`` expression (cached by text). A whole expression wrapped in one
    ``${{ ... }}`` is the expression inside. Raises ConditionSyntaxError (with the
    offset of the problem in ``text``)."""
    wrapped = _WRAPPED.match(text)
    if wrapped is not None and text.count(MARKER) == 1:
        inner = wrapped.group("inner")
        tokens = _tokens(inner, wrapped.start("inner"))
    else:
        tokens = _tokens(text, 0)
    return Condition(text, _Parser(tokens).parse())


def literal_kinds(condition: Condition) -> Iterator[tuple[str, Ref, str, int]]:
    """For lint: ``(op, ref, kind of the literal, offset)`` for every comparison of a
    reference with a literal (either side), so a known type can be checked."""
    stack: list[_Expr] = [condition.tree]
    while stack:
        expr = stack.pop()
        if isinstance(expr, _Cmp):
            pair = (expr.left, expr.right)
            for one, other in (pair, pair[::-1]):
                literal = isinstance(other, _Lit) and other.value is not None
                if isinstance(one, _RefNode) and isinstance(other, _Lit) and literal:
                    yield expr.op, one.ref, _kind(other.value), expr.offset
            stack.extend(pair)
        elif isinstance(expr, _Bool):
            stack.extend((expr.left, expr.right))
        elif isinstance(expr, _Not):
            stack.append(expr.operand)
        elif isinstance(expr, _List):
            stack.extend(expr.items)

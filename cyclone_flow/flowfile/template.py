"""Whole-string ``${{ ... }}`` references in node inputs, and their resolution.

A template is any JSON value. A string that is exactly one reference is replaced by the
value it names; every other value is copied as is. There is no string interpolation: a
``${{`` anywhere else in a string is a lint error (E016) and a :class:`TemplateError` at
render time.

Grammar (whitespace allowed inside the braces)::

    ${{ run.input[.SEG]* }}                 the run input, or a part of it
    ${{ nodes.NAME.output[.SEG]* }}         the output of ancestor NAME, or a part of it
    ${{ item[.SEG]* }}                      in a fan_out node's input: the list element of
                                            the item step, or a part of it

``SEG`` is a key (letters, digits, ``_``, ``-``); an all-digit ``SEG`` indexes a list (and
is a key when the value is a mapping).

Examples
--------
>>> render({"id": "${{ run.input.order.id }}"}, {"order": {"id": 7}}, lambda n: None)
{'id': 7}
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from cyclone_flow.errors import TemplateError
from cyclone_flow.flowfile.model import JSON

__all__ = ["MARKER", "SKIPPED", "Ref", "find_strings", "parse_ref", "references", "render"]

MARKER = "${{"
"""The opening of a reference; any string containing it must be exactly one reference."""

_WHOLE = re.compile(r"^\$\{\{\s*(?P<expr>[^{}]*?)\s*\}\}$")
_SEG = r"[A-Za-z0-9_-]+"
_RUN = re.compile(rf"^run\.input(?P<path>(\.{_SEG})*)$")
_NODES = re.compile(rf"^nodes\.(?P<node>[A-Za-z_][A-Za-z0-9_]*)\.output(?P<path>(\.{_SEG})*)$")
_ITEM = re.compile(rf"^item(?P<path>(\.{_SEG})*)$")
_HEADS = {"run": "run.input", "item": "item"}


class _Skipped:
    """The type of :data:`SKIPPED`."""

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = _Skipped()
"""What an ``upstream`` callable of :func:`render` returns for a skipped node (its
``when:`` was false): every reference into its output renders as ``null``, whatever the
path (the dependent runs with ``on_dep_skip: run``)."""


@dataclass(frozen=True)
class Ref:
    """One parsed reference.

    ``kind`` is ``"run"`` (the run input), ``"nodes"`` (an upstream output) or ``"item"``
    (a fan-out item's list element); ``node`` is the upstream node's name (``None`` for
    ``"run"`` and ``"item"``); ``path`` the keys and list indexes
    below it (digit strings stay strings); ``text`` the whole string as written.
    """

    kind: Literal["run", "nodes", "item"]
    node: str | None
    path: tuple[str, ...]
    text: str

    @property
    def expression(self) -> str:
        """The normalised expression, e.g. ``nodes.fetch.output.items.0``."""
        return ".".join((_head(self), *self.path))


def parse_ref(text: str) -> Ref | None:
    """Parse ``text`` as a reference.

    Returns
    -------
    Ref | None
        The reference, or ``None`` when ``text`` does not contain ``${{`` (a plain string).

    Raises
    ------
    TemplateError
        When ``text`` contains ``${{`` but is not exactly one well-formed reference.
    """
    if MARKER not in text:
        return None
    whole = _WHOLE.match(text)
    if whole is None:
        raise TemplateError(
            f"malformed expression {text!r}: a '${{{{' string must be exactly one "
            "'${{ run.input... }}' or '${{ nodes.NAME.output... }}' reference "
            "(no interpolation inside longer strings)"
        )
    expr = whole.group("expr")
    run = _RUN.match(expr)
    if run is not None:
        return Ref("run", None, _split(run.group("path")), text)
    nodes = _NODES.match(expr)
    if nodes is not None:
        return Ref("nodes", nodes.group("node"), _split(nodes.group("path")), text)
    item = _ITEM.match(expr)
    if item is not None:
        return Ref("item", None, _split(item.group("path")), text)
    raise TemplateError(
        f"malformed expression {text!r}: expected 'run.input[.key...]', "
        "'nodes.NAME.output[.key...]' or 'item[.key...]' (keys: letters, digits, '_', '-')"
    )


def _head(ref: Ref) -> str:
    return _HEADS.get(ref.kind) or f"nodes.{ref.node}.output"


def _split(path: str) -> tuple[str, ...]:
    return tuple(path.split(".")[1:]) if path else ()


def find_strings(
    template: JSON, at: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Yield ``(path, string)`` for every string value in ``template`` containing ``${{``.

    ``path`` is the JSON path below ``at`` (mapping keys are not searched).
    """
    stack: list[tuple[tuple[str | int, ...], JSON]] = [(at, template)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if MARKER in value:
                yield path, value
        elif isinstance(value, dict):
            stack.extend(((*path, k), v) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(value))))


def references(template: JSON) -> list[Ref]:
    """Every reference in ``template``, in document order.

    Raises
    ------
    TemplateError
        On the first malformed ``${{`` string.
    """
    refs = []
    for _, text in find_strings(template):
        ref = parse_ref(text)
        if ref is not None:
            refs.append(ref)
    return refs


def render(
    template: JSON, run_input: JSON, upstream: Callable[[str], JSON], item: JSON = None
) -> JSON:
    """Return a copy of ``template`` with every reference replaced by its value.

    Parameters
    ----------
    template
        A JSON value (a node's ``input`` or ``over``).
    run_input
        The run's input.
    upstream
        ``upstream(name)`` returns node ``name``'s output (:data:`SKIPPED` for a skipped
        node: the reference is null); called once per reference.
    item
        The list element of a fan-out item step (``${{ item... }}``).

    Raises
    ------
    TemplateError
        When a reference is malformed, or a key or index on its path does not exist; the
        message names the expression. Errors raised by ``upstream`` propagate unchanged.
    """
    if isinstance(template, str):
        ref = parse_ref(template)
        if ref is None:
            return template
        if ref.kind == "run":
            root = run_input
        elif ref.kind == "item":
            root = item
        else:
            root = upstream(ref.node or "")
            if root is SKIPPED:
                return None
        return _walk(root, ref)
    if isinstance(template, dict):
        return {k: render(v, run_input, upstream, item) for k, v in template.items()}
    if isinstance(template, list):
        return [render(v, run_input, upstream, item) for v in template]
    return template


def _walk(value: JSON, ref: Ref) -> JSON:
    head = _head(ref)
    for depth, seg in enumerate(ref.path):
        where = ".".join((head, *ref.path[:depth]))
        if isinstance(value, dict):
            if seg not in value:
                raise TemplateError(
                    f"cannot resolve {ref.expression!r}: {where} has no key {seg!r}"
                )
            value = value[seg]
        elif isinstance(value, list):
            if not seg.isdigit():
                raise TemplateError(
                    f"cannot resolve {ref.expression!r}: {where} is a list, {seg!r} is not an index"
                )
            index = int(seg)
            if index >= len(value):
                raise TemplateError(
                    f"cannot resolve {ref.expression!r}: index {index} is out of range "
                    f"({where} has {len(value)} items)"
                )
            value = value[index]
        else:
            kind = "null" if value is None else type(value).__name__
            raise TemplateError(
                f"cannot resolve {ref.expression!r}: {where} is a {kind}, not a mapping or list"
            )
    return value

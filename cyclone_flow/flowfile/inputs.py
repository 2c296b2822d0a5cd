"""Run inputs against a flow's ``input_schema``: top-level defaults, then validation.

Used by submit (the run input) and by the engine when a child node starts its child run
(the rendered child input against the child flow's schema).

References (``$ref``, ``$dynamicRef``) are followed inside the schema only: the validator
has a registry that retrieves nothing, so a ``$ref`` to ``http://...`` or ``file:///...``
never reaches the network or the filesystem (jsonschema would otherwise fetch it). A
reference that cannot be resolved, or that loops back to itself without going deeper
into the input (``{"$ref": "#"}``), is an :class:`InputValidationError` at submit, and
E006 at lint (:func:`ref_problems`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012, specification_with

from cyclone_flow.errors import InputValidationError, shown
from cyclone_flow.flowfile.model import JSON

__all__ = ["InputValidator", "apply_defaults", "ref_problems", "validate_input"]

_NOTHING_RETRIEVED: Registry[Any] = Registry()  # no ``retrieve``: unknown URIs are unresolvable
_BASE_URI = "urn:cyclone-flow:input-schema"
_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
# keywords whose subschemas apply to the same instance (no step deeper into the input)
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MAPS = ("dependentSchemas", "dependencies")
SchemaPath = tuple[str | int, ...]

MAX_MESSAGE_CHARS = 500
"""Characters of a schema error's message kept (it quotes the offending value)."""


def apply_defaults(schema: Mapping[str, Any], value: JSON) -> JSON:
    """Fill top-level ``properties.*.default`` of an object input schema (None input
    counts as ``{}`` when the schema is an object schema)."""
    props = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(props, Mapping):
        return value
    if value is None:
        value = {}
    if not isinstance(value, dict):
        return value
    filled = dict(value)
    for key, sub in props.items():
        if key not in filled and isinstance(sub, Mapping) and "default" in sub:
            filled[key] = sub["default"]
    return filled


def validate_input(flow: str, schema: Mapping[str, Any] | None, value: JSON) -> JSON:
    """Return ``value`` with the schema's top-level defaults filled in.

    Raises
    ------
    InputValidationError
        When the filled value does not match ``schema`` (the best-matching error, with
        its JSON path). ``schema`` None accepts anything.
    """
    return InputValidator(flow, schema)(value)


class InputValidator:
    """The compiled check of one flow's ``input_schema`` (what :func:`validate_input`
    does, with the validator built once: an inserter keeps one per definition).
    Calling it returns the value with the top-level defaults filled in, or raises
    :class:`InputValidationError`."""

    __slots__ = ("_validator", "flow", "schema")

    def __init__(self, flow: str, schema: Mapping[str, Any] | None) -> None:
        self.flow = flow
        self.schema = schema
        self._validator = (
            None
            if schema is None
            else jsonschema.Draft202012Validator(schema, registry=_NOTHING_RETRIEVED)
        )

    def __call__(self, value: JSON) -> JSON:
        if self.schema is None or self._validator is None:
            return value
        flow = self.flow
        value = apply_defaults(self.schema, value)
        try:
            error = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
        except Unresolvable as exc:  # jsonschema wraps it, keeping this base class
            ref = getattr(exc, "ref", None)
            raise InputValidationError(
                flow,
                f"input_schema has a reference{f' {shown(ref)}' if ref else ''} that cannot "
                "be resolved: only references inside the schema ('#/$defs/...') are "
                "followed, nothing is fetched",
            ) from None
        except RecursionError:
            raise InputValidationError(
                flow,
                "input_schema has a $ref that loops back to itself without going deeper into "
                "the input (run lint: E006)",
            ) from None
        if error is not None:
            path = "/".join(str(p) for p in error.absolute_path)
            message = error.message  # quotes the bad value, which may be megabytes long
            if len(message) > MAX_MESSAGE_CHARS:
                message = message[: MAX_MESSAGE_CHARS - 1] + "…"
            raise InputValidationError(flow, message, path)
        return value


_WHY = {
    "PointerToNowhere": "nothing is at that place in the schema",
    "NoSuchAnchor": "the schema has no such anchor",
    "InvalidAnchor": "not an anchor of the schema",
}


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def ref_problems(schema: Mapping[str, Any]) -> list[tuple[SchemaPath, str]]:
    """The reference problems of a JSON Schema (lint E006), in schema order:
    ``(path, message)`` with ``path`` leading to the reference's value inside ``schema``.

    A reference must point inside the schema (start with ``#``), must resolve there, and
    must not loop back to itself through keywords that apply to the same value
    (``$ref``, ``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if``/``then``/``else``,
    ``dependentSchemas``): validating would never end. Nothing is fetched.
    """
    dialect = schema.get("$schema")
    specification = (
        specification_with(dialect, default=DRAFT202012) if isinstance(dialect, str) else None
    )
    root = (specification or DRAFT202012).create_resource(schema)
    base = root.id() or _BASE_URI
    resolver = _NOTHING_RETRIEVED.with_resource(base, root).resolver(base_uri=base)
    paths = _paths(schema)
    problems: list[tuple[SchemaPath, str]] = []
    refs: dict[int, list[tuple[str, Any]]] = {}  # id(subschema) -> its (keyword, target)
    stack: list[tuple[Resource[Any], Any]] = [(root, resolver)]
    while stack:
        resource, here = stack.pop()
        contents = resource.contents
        if isinstance(contents, dict):
            for keyword in _REF_KEYWORDS:
                ref = contents.get(keyword)
                if not isinstance(ref, str):
                    continue
                where = (*paths.get(id(contents), ()), keyword)
                if not ref.startswith("#"):
                    problems.append(
                        (
                            where,
                            f"{keyword} {shown(ref)} is not a reference inside the schema: "
                            "only '#...' references are followed (nothing is fetched); put "
                            "the definition under $defs",
                        )
                    )
                    continue
                try:
                    target = here.lookup(ref).contents
                except Exception as exc:  # Unresolvable, or a malformed pointer
                    why = _WHY.get(type(exc).__name__, f"({_short(exc)})")
                    problems.append((where, f"{keyword} {shown(ref)} cannot be resolved: {why}"))
                    continue
                refs.setdefault(id(contents), []).append((keyword, target))
        for sub in resource.subresources():
            stack.append((sub, here.in_subresource(sub)))
    loop = _loop(schema, refs)
    if loop is not None:
        node, keyword, ref = loop
        problems.append(
            (
                (*paths.get(id(node), ()), keyword),
                f"{keyword} {shown(ref)} loops back to itself without going deeper into the "
                "input: validating would never end",
            )
        )
    return sorted(problems, key=lambda p: [str(x) for x in p[0]])


def _paths(schema: Any) -> dict[int, SchemaPath]:
    """``id(dict) -> its path`` for every mapping inside ``schema``."""
    out: dict[int, SchemaPath] = {}
    stack: list[tuple[Any, SchemaPath]] = [(schema, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            out.setdefault(id(item), path)
            stack.extend((v, (*path, k)) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(item))
    return out


def _in_place(node: dict[str, Any], refs: dict[int, list[tuple[str, Any]]]) -> Iterator[Any]:
    """The subschemas applied to the same instance as ``node``, reference targets too."""
    for keyword in _IN_PLACE_LISTS:
        items = node.get(keyword)
        if isinstance(items, list):
            yield from items
    for keyword in _IN_PLACE_ONE:
        if keyword in node:
            yield node[keyword]
    for keyword in _IN_PLACE_MAPS:
        subs = node.get(keyword)
        if isinstance(subs, dict):
            yield from subs.values()
    for _, target in refs.get(id(node), ()):
        yield target


def _loop(schema: Any, refs: dict[int, list[tuple[str, Any]]]) -> tuple[Any, str, str] | None:
    """A subschema whose reference closes a loop of in-place applicators, with that
    reference's keyword and value; None when there is none. Iterative depth-first."""
    nodes: dict[int, Any] = {}
    stack: list[Any] = [schema]
    while stack:  # every mapping of the schema is a possible start
        item = stack.pop()
        if isinstance(item, dict):
            nodes.setdefault(id(item), item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    done: set[int] = set()
    for start in nodes.values():
        if id(start) in done:
            continue
        on_path: set[int] = {id(start)}
        walk: list[tuple[Any, Iterator[Any]]] = [(start, _in_place(start, refs))]
        while walk:
            node, children = walk[-1]
            child = next(children, None)
            if child is None:
                walk.pop()
                on_path.discard(id(node))
                done.add(id(node))
                continue
            if not isinstance(child, dict) or id(child) in done:
                continue
            if id(child) in on_path:  # back to a schema being walked: a loop
                cycle = [n for n, _ in walk]
                cycle = [*cycle[next(i for i, n in enumerate(cycle) if n is child) :], child]
                for owner, after in itertools.pairwise(cycle):
                    for keyword, target in refs.get(id(owner), ()):
                        if target is after:  # a loop passes through a reference
                            return owner, keyword, owner[keyword]
                continue  # (not possible: nesting alone makes no loop)
            on_path.add(id(child))
            walk.append((child, _in_place(child, refs)))
    return None

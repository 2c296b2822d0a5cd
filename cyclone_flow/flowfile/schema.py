"""Validate a parsed flow against ``schemas/flow.schema.json`` (JSON Schema 2020-12).

Every schema error becomes a :class:`Problem` with code E003 (E015 for a bad node name)
at the line and column of the offending key or value. The schema may carry two
annotations the validator ignores and this module reads: ``x-message`` (replaces the
generic message of any failure in that subschema) and ``x-note`` (appended to a
"missing required key" message).
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from cyclone_flow.errors import Problem, shown
from cyclone_flow.flowfile.inputs import ref_problems
from cyclone_flow.flowfile.read import Document, JsonPath
from cyclone_flow.resources import schemas_dir

__all__ = ["check_input_schema", "flow_schema", "validate_document"]

_JSON_TYPES = {
    dict: "a mapping",
    list: "a list",
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    type(None): "null",
}


@functools.cache
def flow_schema() -> dict[str, Any]:
    """The packaged flow JSON Schema, parsed once."""
    text = (schemas_dir() / "flow.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.cache
def _ecma_regex(pattern: str) -> re.Pattern[str]:
    # ECMA-262 (the regex dialect of JSON Schema) ends a pattern's $ at the very end of
    # the string; Python's $ also matches before a final newline
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))


def _ecma_pattern(
    validator: Any, pattern: str, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """The ``pattern`` keyword with ``$`` read as in ECMA-262, so that ``"default\\n"`` is
    not a queue name (nor ``"a\\n"`` a node name) as it would be for Python's ``re``."""
    if validator.is_type(instance, "string") and not _ecma_regex(pattern).search(instance):
        yield ValidationError(f"{shown(instance)} does not match {pattern!r}")


_FlowValidator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, {"pattern": _ecma_pattern}
)


@functools.cache
def _validator() -> Any:
    return _FlowValidator(_inline_refs(flow_schema(), flow_schema()))


_ANNOTATIONS = frozenset(("description", "title", "default", "examples", "$comment"))


def _inline_refs(schema: Any, root: dict[str, Any]) -> Any:
    """``schema`` with each local ``{"$ref": "#/$defs/NAME", ...}`` replaced by a copy of
    the definition (its other keywords kept), so the validator does not look references
    up for every value: about a third faster on a flow of thousands of nodes. The
    definitions must not refer to themselves (the flow schema's do not). A ``$ref`` with
    siblings other than annotations (``description``, ...) stays a ``$ref``: the error
    messages (``x-message``) stay those of the subschema that failed."""
    if isinstance(schema, list):
        return [_inline_refs(item, root) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k == "$defs" else _inline_refs(v, root) for k, v in schema.items()}
    ref = out.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = root.get("$defs", {}).get(ref.removeprefix("#/$defs/"))
        siblings = {k for k in out if k != "$ref"}
        if isinstance(target, dict) and siblings <= _ANNOTATIONS:
            merged: dict[str, Any] = _inline_refs(target, root)
            merged = dict(merged)
            merged.update({k: out[k] for k in siblings})
            return merged
    return out


def validate_document(doc: Document) -> list[Problem]:
    """Every schema problem of ``doc``, sorted by position.

    Codes: E003 (schema), E015 (a node name that is not an identifier).
    """
    problems: list[Problem] = []
    for error in _validator().iter_errors(doc.data):
        problems.extend(_to_problems(doc, error))
    return sorted(set(problems), key=lambda p: (p.line, p.col, p.code, p.message))


def check_input_schema(doc: Document) -> list[Problem]:
    """E006 when ``input_schema`` is a mapping that is not a valid JSON Schema, or has a
    reference that points outside it, does not resolve or loops (see
    :func:`cyclone_flow.flowfile.inputs.ref_problems`), at the reference's position.

    The metaschema is the one named by its ``$schema`` (default 2020-12).
    """
    data = doc.data
    schema = data.get("input_schema") if isinstance(data, dict) else None
    if not isinstance(schema, dict):
        return []
    try:
        cls = validator_for(schema, default=Draft202012Validator)
        cls.check_schema(schema)
    except SchemaError as exc:
        where = ("input_schema", *exc.absolute_path)
        return [doc.problem(doc.value_pos(where), "E006", f"invalid input_schema: {exc.message}")]
    except Exception as exc:  # an odd $schema or regex may raise anything
        return [
            doc.problem(doc.value_pos(("input_schema",)), "E006", f"invalid input_schema: {exc}")
        ]
    # references: inside the schema only, resolvable, not looping (nothing is fetched)
    return [
        doc.problem(
            doc.value_pos(("input_schema", *where)), "E006", f"invalid input_schema: {message}"
        )
        for where, message in ref_problems(schema)
    ]


def _label(path: JsonPath) -> str:
    return ".".join(str(p) for p in path)


def _prefix(path: JsonPath, message: str) -> str:
    return f"{_label(path)}: {message}" if path else message


def _kind(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _to_problems(doc: Document, error: ValidationError) -> list[Problem]:
    path: JsonPath = tuple(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    custom = schema.get("x-message")
    validator = error.validator

    if "propertyNames" in error.absolute_schema_path:
        name = str(error.instance)
        code = "E015" if path == ("nodes",) else "E003"
        message = custom or f"invalid key {name!r}"
        return [doc.problem(doc.key_pos((*path, name)), code, f"{name!r}: {message}")]

    if validator == "additionalProperties" and error.validator_value is False:
        known = sorted(schema.get("properties", {}))
        instance = error.instance if isinstance(error.instance, dict) else {}
        out = []
        for key in instance:
            if key in known:
                continue
            hint = difflib.get_close_matches(key, known, n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else f" (allowed: {', '.join(known)})"
            out.append(
                doc.problem(
                    doc.key_pos((*path, key)),
                    "E003",
                    _prefix(path, f"unknown key {key!r}{extra}"),
                )
            )
        return out

    if validator == "required":
        found = re.match(r"^'(.+)' is a required property", error.message)
        name = found.group(1) if found else error.message
        note = schema.get("x-note")
        suffix = f" ({note})" if note else ""
        return [
            doc.problem(
                doc.key_pos(path), "E003", _prefix(path, f"missing required key {name!r}{suffix}")
            )
        ]

    if validator == "not":
        return [doc.problem(doc.key_pos(path), "E003", _prefix(path, custom or error.message))]

    if custom:
        message = custom
    elif validator == "type":
        wanted: Any = error.validator_value
        names = [wanted] if isinstance(wanted, str) else list(wanted)
        message = f"must be {' or '.join(names)}, not {_kind(error.instance)}"
    elif validator == "enum":
        values: Any = error.validator_value
        choices = ", ".join(str(c) for c in values)
        message = f"must be one of {choices} (got {error.instance!r})"
    elif validator == "minProperties" and error.validator_value == 1:
        message = "must not be empty"
    else:
        message = error.message
    return [doc.problem(doc.value_pos(path), "E003", _prefix(path, message))]

"""Run inputs against a flow's ``input_schema``: top-level defaults, then validation.

Used by submit (the run input) and by the engine when a child node starts its child run
(the rendered child input against the child flow's schema).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema

from cyclone_flow.errors import InputValidationError
from cyclone_flow.flowfile.model import JSON

__all__ = ["apply_defaults", "validate_input"]


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
    if schema is None:
        return value
    value = apply_defaults(schema, value)
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        path = "/".join(str(p) for p in error.absolute_path)
        raise InputValidationError(flow, error.message, path)
    return value

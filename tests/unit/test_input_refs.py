"""``$ref`` in a flow's input_schema: followed inside the schema
only, never fetched; unresolvable or looping references are E006 at lint and an
InputValidationError at submit, not a traceback. No database."""

from __future__ import annotations

from typing import Any

import pytest

from cyclone_flow.errors import InputValidationError
from cyclone_flow.flowfile.inputs import MAX_MESSAGE_CHARS, ref_problems, validate_input

LOOPS: list[dict[str, Any]] = [
    {"$ref": "#"},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"anyOf": [{"type": "string"}, {"$ref": "#"}]},
    {"$defs": {"a": {"not": {"allOf": [{"$ref": "#/$defs/a"}]}}}, "$ref": "#/$defs/a"},
    {"if": {"$ref": "#"}},
]
FINE: list[tuple[dict[str, Any], Any]] = [
    ({"type": "object", "properties": {"child": {"$ref": "#"}}}, {"child": {"child": {}}}),
    ({"$defs": {"s": {"type": "string"}}, "items": {"$ref": "#/$defs/s"}}, ["a"]),
    ({"$defs": {"s": {"$anchor": "name", "type": "string"}}, "$ref": "#name"}, "a"),
    (
        {"enum": [{"$ref": "http://data.not.a.reference/"}]},
        {"$ref": "http://data.not.a.reference/"},
    ),
]


@pytest.mark.parametrize("schema", LOOPS)
def test_a_looping_reference_is_found_and_refused_at_submit(schema: dict[str, Any]) -> None:
    (found,) = ref_problems(schema)
    assert "loops back to itself" in found[1]
    with pytest.raises(InputValidationError, match="loops back to itself"):
        validate_input("f", schema, 5)


@pytest.mark.parametrize(("schema", "value"), FINE)
def test_references_inside_the_schema_are_fine(schema: dict[str, Any], value: Any) -> None:
    assert ref_problems(schema) == []
    assert validate_input("f", schema, value) == value


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ("http://127.0.0.1:9/x.json", "is not a reference inside the schema"),
        ("file:///etc/passwd", "is not a reference inside the schema"),
        ("other.json#/a", "is not a reference inside the schema"),
        ("#/$defs/nope", "cannot be resolved"),
        ("#no-such-anchor", "cannot be resolved"),
    ],
)
def test_a_reference_outside_the_schema_or_unresolvable_is_refused(ref: str, needle: str) -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": ref}}}
    assert [(p, needle in m) for p, m in ref_problems(schema)] == [
        (("properties", "a", "$ref"), True)
    ]
    with pytest.raises(InputValidationError, match="cannot be resolved") as info:
        validate_input("f", schema, {"a": 1})
    assert "nothing is fetched" in str(info.value)


def test_a_schema_error_quoting_a_huge_value_is_cut_short() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}}
    with pytest.raises(InputValidationError) as info:
        validate_input("f", schema, {"name": "x" * 2_000_000})
    assert info.value.path == "name"
    assert len(str(info.value)) < MAX_MESSAGE_CHARS + 100
    assert str(info.value).endswith("…")

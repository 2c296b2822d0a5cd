"""flowfile.compare: two versions of a flow compared node by node (after ``defaults``),
schedule by schedule and input schema against input schema; the JSON and text shapes
that ``cyclone-flow diff`` shows. No database."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.flowfile.compare import (
    FieldChange,
    FlowChange,
    NodeSummary,
    ScheduleChange,
    compare_documents,
    describe_change,
    schema_changes,
    source_diff,
)
from cyclone_flow.names import schedule_default_name
from cyclone_flow.schedules import default_schedule_name


def doc(text: str) -> dict[str, Any]:
    """The stored document of a flow YAML (loaded, so it is valid)."""
    return dict(load_flow_text(textwrap.dedent(text), "f.yaml").document)


BASE = """
name: shop
defaults: {retry: {max_attempts: 3}}
nodes:
  fetch:
    call: shop.h:fetch
  charge:
    call: shop.h:charge
    needs: [fetch]
    timeout: 30s
"""


def flow(**nodes: dict[str, Any]) -> dict[str, Any]:
    """A document named ``f`` with the given nodes (an action or fan_out calls ``m:f``
    unless it says)."""
    return {
        "name": "f",
        "nodes": {
            k: {"call": "m:f", **v} if v.get("type", "action") in ("action", "fan_out") else v
            for k, v in nodes.items()
        },
    }


def compare(old: dict[str, Any] | None, new: dict[str, Any] | None) -> FlowChange:
    """:func:`compare_documents` of two documents checked valid first (JSON is YAML)."""
    for document in (old, new):
        if document is not None:
            assert load_flow_text(json.dumps(document), "f.yaml").document == document
    return compare_documents(old, new)


def fields(change: FlowChange, node: str) -> dict[str, tuple[Any, Any]]:
    [found] = [n for n in change.nodes_changed if n.name == node]
    return {f.field: (f.old, f.new) for f in found.fields}


# --- status -------------------------------------------------------------------------


def test_equal_documents_are_unchanged() -> None:
    change = compare_documents(doc(BASE), doc(BASE))
    assert change.status == "unchanged"
    assert change.name == "shop"
    assert not change.nodes_changed and not change.flow_fields and not change.schema
    assert describe_change(change) == []


def test_added_flow_lists_its_nodes_and_schedules() -> None:
    new = flow(a={}, b={"type": "wait_signal", "signal": "go"})
    new["schedules"] = [{"name": "n", "cron": "@daily"}]
    change = compare(None, new)
    assert change.status == "added"
    assert change.nodes_added == (
        NodeSummary("a", "action", "m:f"),
        NodeSummary("b", "wait_signal", None),
    )
    assert [(s.name, s.change) for s in change.schedules] == [("n", "added")]
    assert change.flow_fields == () and change.schema == ()
    assert describe_change(change)[:3] == [
        "+ flow f",
        "+ node a (action)",
        "+ node b (wait_signal)",
    ]


def test_removed_flow() -> None:
    change = compare(flow(a={}), None)
    assert change.status == "removed"
    assert change.name == "f"
    assert [n.name for n in change.nodes_removed] == ["a"]
    assert describe_change(change) == ["- flow f", "- node a"]


def test_both_absent_is_an_error() -> None:
    with pytest.raises(ValueError, match="both"):
        compare_documents(None, None)


def test_same_effect_written_differently_is_changed_with_a_line() -> None:
    change = compare(flow(a={"timeout": "60s"}), flow(a={"timeout": "1m"}))
    assert change.status == "changed"
    assert change.nodes_changed == ()
    assert describe_change(change) == ["~ flow f: written differently, same effect"]


# --- nodes --------------------------------------------------------------------------


def test_nodes_added_removed_changed_in_file_order() -> None:
    change = compare(
        flow(a={}, b={}, c={}),
        flow(z={}, a={"call": "m:g"}, c={}, y={"type": "fan_out", "over": []}),
    )
    assert [n.name for n in change.nodes_added] == ["z", "y"]
    assert [n.name for n in change.nodes_removed] == ["b"]
    assert [n.name for n in change.nodes_changed] == ["a"]
    assert change.nodes_changed[0].fields == (FieldChange("call", "m:f", "m:g"),)


@pytest.mark.parametrize(
    ("old", "new", "field", "values"),
    [
        ({}, {"needs": ["x"]}, "needs", ([], ["x"])),
        ({}, {"input": {"a": 1}}, "input", (None, {"a": 1})),
        ({"input": {"a": True}}, {"input": {"a": 1}}, "input", ({"a": True}, {"a": 1})),
        ({}, {"when": "run.input.ok"}, "when", (None, "run.input.ok")),
        ({"when": True}, {"when": False}, "when", ("true", "false")),
        ({}, {"timeout": "30s"}, "timeout", (None, 30.0)),
        ({}, {"queue": "fast"}, "queue", ("default", "fast")),
        ({}, {"priority": -1}, "priority", (0, -1)),
        ({}, {"on_dep_failure": "cancel_branch"}, "on_dep_failure", ("fail_run", "cancel_branch")),
        ({}, {"on_dep_skip": "run"}, "on_dep_skip", ("skip", "run")),
        ({}, {"import_wait": "1h"}, "import_wait", (None, 3600.0)),
    ],
)
def test_each_node_field(
    old: dict[str, Any], new: dict[str, Any], field: str, values: tuple[Any, Any]
) -> None:
    base: dict[str, dict[str, Any]] = {"x": {}}
    change = compare(flow(**base, n=old), flow(**base, n=new))
    assert fields(change, "n") == {field: values}


def test_type_and_options() -> None:
    old = flow(n={"type": "fan_out", "over": "${{ run.input.a }}", "max_parallel": 2})
    new = flow(n={"type": "fan_out", "over": "${{ run.input.b }}", "max_parallel": 4})
    assert fields(compare(old, new), "n") == {
        "over": ("${{ run.input.a }}", "${{ run.input.b }}"),
        "max_parallel": (2, 4),
    }
    to_signal = flow(n={"type": "wait_signal", "signal": "go", "max_wait": "1h"})
    got = fields(compare(old, to_signal), "n")
    assert got["type"] == ("fan_out", "wait_signal")
    assert got["call"] == ("m:f", None)
    assert got["signal"] == (None, "go")
    assert got["max_wait"] == (None, 3600.0)
    assert got["over"] == ("${{ run.input.a }}", None)


def test_child_flow_option() -> None:
    old = {"name": "f", "nodes": {"c": {"type": "child", "flow": "a.yaml"}}}
    new = {"name": "f", "nodes": {"c": {"type": "child", "flow": "b.yaml", "max_wait": 60}}}
    assert fields(compare_documents(old, new), "c") == {  # child files not loaded
        "flow": ("a.yaml", "b.yaml"),
        "max_wait": (None, 60.0),
    }


def test_retry_is_a_dict_with_backoff_in_seconds() -> None:
    change = compare(
        flow(n={}), flow(n={"retry": {"max_attempts": 5, "backoff": {"initial": "2s"}}})
    )
    old, new = fields(change, "n")["retry"]
    assert old == {
        "max_attempts": 1,
        "backoff": {"initial": 1.0, "max": 300.0, "multiplier": 2.0, "jitter": 0.1},
    }
    assert new["max_attempts"] == 5 and new["backoff"]["initial"] == 2.0
    [line] = describe_change(change)
    assert line == "~ node n: retry.max_attempts 1 -> 5, retry.backoff.initial 1s -> 2s"


def test_a_default_change_shows_on_every_node_that_inherits_it() -> None:
    old = doc(BASE)
    new = doc(BASE.replace("max_attempts: 3", "max_attempts: 4"))
    change = compare(old, new)
    assert [n.name for n in change.nodes_changed] == ["fetch", "charge"]
    for node in ("fetch", "charge"):
        assert fields(change, node)["retry"][0]["max_attempts"] == 3
        assert fields(change, node)["retry"][1]["max_attempts"] == 4
    assert [f.field for f in change.flow_fields] == ["defaults"]
    assert "~ defaults.retry.max_attempts 3 -> 4" in describe_change(change)


def test_a_node_that_sets_the_key_does_not_inherit_the_default_change() -> None:
    old = flow(a={}, b={"queue": "own"})
    old["defaults"] = {"queue": "q1"}
    new = {**old, "defaults": {"queue": "q2"}}
    change = compare(old, new)
    assert [n.name for n in change.nodes_changed] == ["a"]
    assert fields(change, "a") == {"queue": ("q1", "q2")}


def test_limits_as_dicts() -> None:
    old = flow(n={"concurrency": {"limit": 2}})
    new = flow(
        n={
            "concurrency": {"limit": 3, "key": "${{ run.input.tenant }}"},
            "rate_limit": {"limit": 10, "per": "1m", "group": "api"},
        }
    )
    got = fields(compare(old, new), "n")
    assert got["concurrency"] == (
        {"group": "f.n", "limit": 2, "key": None, "per": None},
        {"group": "f.n", "limit": 3, "key": "${{ run.input.tenant }}", "per": None},
    )
    assert got["rate_limit"] == (None, {"group": "api", "limit": 10, "key": None, "per": 60.0})


def test_limit_key_from_an_upstream_output() -> None:
    old = flow(a={}, n={"needs": ["a"], "concurrency": {"limit": 1}})
    new = flow(
        a={},
        n={"needs": ["a"], "concurrency": {"limit": 1, "key": "${{ nodes.a.output.id }}"}},
    )
    assert fields(compare(old, new), "n")["concurrency"][1]["key"] == ("${{ nodes.a.output.id }}")


def test_node_field_values_are_json() -> None:
    change = compare(doc(BASE), doc(BASE.replace("30s", "1m")))
    json.dumps(change.to_json())
    assert fields(change, "charge") == {"timeout": (30.0, 60.0)}


# --- flow fields --------------------------------------------------------------------


def test_flow_fields() -> None:
    old = {**flow(a={}), "description": "one", "deadline": "1h"}
    new = {
        **flow(a={}),
        "description": "two",
        "deadline": "2h",
        "import_wait": "5m",
        "input_schema": {"type": "object"},
    }
    change = compare(old, new)
    assert [(f.field, f.old, f.new) for f in change.flow_fields] == [
        ("description", "one", "two"),
        ("deadline", 3600.0, 7200.0),
        ("import_wait", None, 300.0),
        ("input_schema", None, {"type": "object"}),
    ]
    lines = describe_change(change)
    assert "~ description 'one' -> 'two'" in lines
    assert "~ deadline 1h -> 2h" in lines


def test_unknown_top_level_keys_are_flow_fields_but_nodes_and_schedules_are_not() -> None:
    old = {**flow(a={}), "x-team": "a"}
    new = {**flow(a={}, b={}), "x-team": "b", "schedules": [{"cron": "@daily"}]}
    change = compare_documents(old, new)  # no such key today: one a later schema may add
    assert [f.field for f in change.flow_fields] == ["x-team"]


# --- schedules ----------------------------------------------------------------------


def test_schedules_by_name() -> None:
    old = flow(a={})
    old["schedules"] = [
        {"name": "nightly", "cron": "0 2 * * *"},
        {"name": "gone", "cron": "@hourly"},
        {"name": "same", "cron": "@daily"},
    ]
    new = flow(a={})
    new["schedules"] = [
        {"name": "same", "cron": "@daily"},
        {"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Paris", "input": {"a": 1}},
        {"name": "fresh", "cron": "@weekly"},
    ]
    change = compare(old, new)
    assert change.schedules == (
        ScheduleChange(
            "nightly",
            "changed",
            {"cron": "0 2 * * *", "timezone": "UTC", "input": None},
            {"cron": "0 3 * * *", "timezone": "Europe/Paris", "input": {"a": 1}},
        ),
        ScheduleChange(
            "fresh", "added", None, {"cron": "@weekly", "timezone": "UTC", "input": None}
        ),
        ScheduleChange(
            "gone", "removed", {"cron": "@hourly", "timezone": "UTC", "input": None}, None
        ),
    )
    lines = describe_change(change)
    assert (
        "~ schedule nightly: cron '0 2 * * *' -> '0 3 * * *', timezone 'UTC' -> 'Europe/Paris', "
        'input none -> {"a": 1}'
    ) in lines
    assert "+ schedule fresh: cron '@weekly'" in lines
    assert "- schedule gone" in lines


def test_unnamed_schedules_keep_their_default_name() -> None:
    old = flow(a={})
    old["schedules"] = [{"cron": "@daily"}, {"cron": "@hourly"}]
    new = flow(a={})
    new["schedules"] = [{"cron": "@hourly"}, {"cron": "@daily"}]  # reordered: no change
    assert compare(old, new).schedules == ()
    new["schedules"] = [{"cron": "@daily"}, {"cron": "@hourly", "timezone": "Asia/Tokyo"}]
    change = compare(old, new)
    tokyo = schedule_default_name("f", "@hourly", "Asia/Tokyo")
    utc = default_schedule_name("f", "@hourly", "UTC", None)
    assert [(s.name, s.change) for s in change.schedules] == [(tokyo, "added"), (utc, "removed")]


def test_a_named_schedule_and_an_identical_unnamed_one() -> None:
    old = flow(a={})
    old["schedules"] = [{"cron": "@daily"}]
    new = flow(a={})
    new["schedules"] = [{"name": "daily", "cron": "@daily"}]
    change = compare(old, new)
    assert [(s.name, s.change) for s in change.schedules] == [
        ("daily", "added"),
        (schedule_default_name("f", "@daily"), "removed"),
    ]


# --- input schema -------------------------------------------------------------------


def obj(*required: str, closed: bool = False, **props: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    return out


def kinds(old: Any, new: Any) -> list[tuple[str, str, bool]]:
    return [(c.kind, c.path, c.breaking) for c in schema_changes(old, new)]


def test_same_schema_no_changes() -> None:
    schema = obj("a", a={"type": "string"})
    assert schema_changes(schema, schema) == []
    assert schema_changes(None, None) == []


def test_new_required_without_default_breaks() -> None:
    [change] = schema_changes(obj(), obj("region", region={"type": "string"}))
    assert (change.kind, change.path, change.breaking) == ("required_added", "region", True)
    assert change.message == "new required field 'region' has no default"


def test_new_required_with_default_does_not_break() -> None:
    new = obj("region", region={"type": "string", "default": "eu"})
    assert kinds(obj(), new) == [("required_added", "region", False)]


def test_existing_field_made_required() -> None:
    old = obj(a={"type": "string"})
    [change] = schema_changes(old, obj("a", a={"type": "string"}))
    assert change.breaking and change.message == "field 'a' is now required and has no default"


def test_nested_default_does_not_save_a_required_field() -> None:
    old = obj(o=obj(x={"type": "integer"}))
    new = obj(o=obj("x", x={"type": "integer", "default": 1}))
    assert ("required_added", "o.x", True) in kinds(old, new)


def test_required_removed_does_not_break() -> None:
    assert kinds(obj("a", a={}), obj(a={})) == [("required_removed", "a", False)]


@pytest.mark.parametrize(
    ("old", "new", "breaking"),
    [
        ("integer", "number", False),
        ("number", "integer", True),
        ("string", "integer", True),
        ("string", ["string", "null"], False),
        (["string", "null"], "string", True),
        (["integer", "string"], ["number", "string"], False),
    ],
)
def test_type_changes(old: Any, new: Any, breaking: bool) -> None:
    assert kinds(obj(a={"type": old}), obj(a={"type": new})) == [("type_changed", "a", breaking)]


def test_type_set_where_none_was_breaks_unless_the_old_enum_fits_it() -> None:
    assert kinds(obj(a={}), obj(a={"type": "string"})) == [("type_changed", "a", True)]
    # a $ref replaced by a type: the $ref target is not followed, so the type may narrow
    assert kinds(obj(a={"$ref": "#/$defs/x"}), obj(a={"type": "string"})) == [
        ("type_changed", "a", True),
        ("constraint_removed", "a", False),
    ]
    assert kinds(obj(a={"enum": ["x", "y"]}), obj(a={"type": "string", "enum": ["x", "y"]})) == []
    assert kinds(obj(a={"const": 1}), obj(a={"type": "string", "const": 1})) == [
        ("type_changed", "a", True)
    ]
    assert kinds(obj(a={"type": "string"}), obj(a={})) == [("type_changed", "a", False)]


def test_removed_property_breaks_only_when_closed() -> None:
    old = obj(closed=True, a={}, b={})
    assert kinds(old, obj(closed=True, a={})) == [("property_removed", "b", True)]
    assert kinds(obj(a={}, b={}), obj(a={})) == [("property_removed", "b", False)]


def test_closing_and_opening() -> None:
    assert kinds(obj(a={}), obj(closed=True, a={})) == [("closed", "", True)]
    assert kinds(obj(closed=True, a={}), obj(a={})) == [("opened", "", False)]


def test_new_optional_property_and_defaults() -> None:
    changes = schema_changes(obj(a={}), obj(a={"default": 1}, note={"description": "free"}))
    assert [(c.kind, c.path, c.breaking) for c in changes] == [
        ("property_added", "note", False),
        ("default_added", "a", False),
    ]
    assert changes[0].message == "new optional field 'note'"
    assert kinds(obj(a={"default": 1}), obj(a={"default": 2})) == [("default_changed", "a", False)]
    assert kinds(obj(a={}), obj(a={}, b={"default": "x"})) == [("property_added", "b", False)]


def test_default_removed_from_a_required_field_breaks() -> None:
    assert kinds(obj("a", a={"default": 1}), obj("a", a={})) == [("default_removed", "a", True)]
    assert kinds(obj(a={"default": 1}), obj(a={})) == [("default_removed", "a", False)]


def test_enum_narrowed_breaks_widened_does_not() -> None:
    assert kinds(obj(a={"enum": ["x", "y"]}), obj(a={"enum": ["x"]})) == [
        ("enum_changed", "a", True)
    ]
    assert kinds(obj(a={"enum": ["x"]}), obj(a={"enum": ["x", "y"]})) == [
        ("enum_changed", "a", False)
    ]
    assert kinds(obj(a={"type": "string"}), obj(a={"type": "string", "enum": ["x"]})) == [
        ("enum_changed", "a", True)
    ]


def test_nested_object_properties() -> None:
    old = obj(order=obj(id={"type": "integer"}))
    new = obj(order=obj(id={"type": "string"}))
    assert kinds(old, new) == [("type_changed", "order.id", True)]


def test_schema_added_is_compared_with_the_schema_that_accepts_anything() -> None:
    assert kinds(None, {}) == [("schema_added", "", False)]
    assert kinds(None, {"properties": {"a": {"description": "free"}}}) == [
        ("schema_added", "", False),
        ("property_added", "a", False),
    ]
    # no schema accepted any input: an object type refuses the others
    assert kinds(None, obj(a={})) == [
        ("schema_added", "", False),
        ("type_changed", "", True),
        ("property_added", "a", False),
    ]
    assert kinds(None, obj("a", "b", a={"default": 1}, b={})) == [
        ("schema_added", "", False),
        ("type_changed", "", True),
        ("required_added", "a", False),
        ("required_added", "b", True),
    ]


def test_a_new_schema_closed_or_with_required_fields_breaks() -> None:
    closed = {"additionalProperties": False, "properties": {"a": {}}}
    assert kinds(None, closed) == [
        ("schema_added", "", False),
        ("closed", "", True),
        ("property_added", "a", False),
    ]
    assert ("required_added", "b", True) in kinds(None, {"required": ["b"]})
    assert ("constraint_added", "", True) in kinds(None, {"minProperties": 1})


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("pattern", "^[A-Z]+$"),
        ("minimum", 0),
        ("exclusiveMinimum", 0),
        ("maximum", 10),
        ("exclusiveMaximum", 10),
        ("minLength", 1),
        ("maxLength", 3),
        ("minItems", 1),
        ("maxItems", 3),
        ("minProperties", 1),
        ("maxProperties", 3),
        ("const", "x"),
        ("format", "date"),
        ("multipleOf", 2),
        ("anyOf", [{"type": "string"}, {"type": "integer"}]),
        ("not", {"const": "x"}),
        ("$ref", "#/$defs/code"),
        ("dependentRequired", {"a": ["b"]}),
    ],
)
def test_a_validation_keyword_added_breaks_and_removed_does_not(keyword: str, value: Any) -> None:
    assert kinds(obj(code={}), obj(code={keyword: value})) == [("constraint_added", "code", True)]
    assert kinds(obj(code={keyword: value}), obj(code={})) == [
        ("constraint_removed", "code", False)
    ]


def test_a_constraint_message_says_it_may_refuse_inputs() -> None:
    [change] = schema_changes(obj(code={}), obj(code={"pattern": "^[A-Z]+$"}))
    assert change.message == (
        "field 'code': pattern added: '^[A-Z]+$' (may refuse inputs the old schema accepted)"
    )
    [change] = schema_changes(obj(code={"pattern": "^[A-Z]+$"}), obj(code={}))
    assert change.message == "field 'code': pattern removed (was '^[A-Z]+$')"
    [change] = schema_changes({"minProperties": 1}, {"minProperties": 2})
    assert change.message == (
        "the input: minProperties raised: 1 -> 2 (may refuse inputs the old schema accepted)"
    )


@pytest.mark.parametrize(
    ("keyword", "old", "new", "breaking"),
    [
        ("minimum", 1, 2, True),
        ("minimum", 2, 1, False),
        ("exclusiveMinimum", 0, 0.5, True),
        ("maximum", 10, 5, True),
        ("maximum", 5, 10, False),
        ("exclusiveMaximum", 5, 4, True),
        ("minLength", 1, 2, True),
        ("maxLength", 10, 3, True),
        ("maxLength", 3, 10, False),
        ("minItems", 0, 1, True),
        ("maxItems", 5, 4, True),
        ("minProperties", 2, 1, False),
        ("maxProperties", 5, 4, True),
    ],
)
def test_a_bound_tightened_breaks_loosened_does_not(
    keyword: str, old: int, new: float, breaking: bool
) -> None:
    kind = "constraint_tightened" if breaking else "constraint_loosened"
    assert kinds(obj(a={keyword: old}), obj(a={keyword: new})) == [(kind, "a", breaking)]


@pytest.mark.parametrize(
    ("keyword", "old", "new"),
    [
        ("pattern", "^a", "^b"),
        ("const", 1, 2),
        ("format", "date", "email"),
        ("multipleOf", 2, 3),
        ("$ref", "#/$defs/a", "#/$defs/b"),
        ("exclusiveMinimum", True, False),  # not a number: direction unknown
    ],
)
def test_a_keyword_changed_otherwise_breaks(keyword: str, old: Any, new: Any) -> None:
    assert kinds(obj(a={keyword: old}), obj(a={keyword: new})) == [
        ("constraint_changed", "a", True)
    ]


def test_items_are_compared_recursively() -> None:
    def tags(items: Any) -> dict[str, Any]:
        return obj(tags={"type": "array", "items": items})

    [change] = schema_changes(tags({"type": "string"}), tags({"type": "integer"}))
    assert (change.kind, change.path, change.breaking) == ("type_changed", "tags[]", True)
    assert change.message == "type of field 'tags[]' changed: string -> integer"
    assert kinds(tags({"type": "integer"}), tags({"type": "number"})) == [
        ("type_changed", "tags[]", False)
    ]
    assert kinds(tags({}), tags({"maxLength": 3})) == [("constraint_added", "tags[]", True)]
    assert kinds(tags({"maxLength": 3}), tags({})) == [("constraint_removed", "tags[]", False)]
    assert kinds(obj(tags={"type": "array"}), tags({"type": "string"})) == [
        ("type_changed", "tags[]", True)
    ]
    nested = kinds(tags(obj(id={"type": "integer"})), tags(obj("id", id={"type": "string"})))
    assert nested == [("required_added", "tags[].id", True), ("type_changed", "tags[].id", True)]
    assert kinds(tags(True), tags(False)) == [("constraint_added", "tags[]", True)]
    assert kinds(tags(False), tags(True)) == [("constraint_removed", "tags[]", False)]


def test_nested_properties_constraints() -> None:
    old = obj(order=obj(code={"type": "string"}))
    new = obj(order=obj(code={"type": "string", "pattern": "^[0-9]+$"}))
    assert kinds(old, new) == [("constraint_added", "order.code", True)]


def test_unique_items_and_additional_properties_schemas() -> None:
    assert kinds(obj(a={}), obj(a={"uniqueItems": True})) == [("constraint_added", "a", True)]
    assert kinds(obj(a={"uniqueItems": True}), obj(a={"uniqueItems": False})) == [
        ("constraint_removed", "a", False)
    ]
    assert kinds(obj(a={}), obj(a={"uniqueItems": False})) == []
    typed = {"additionalProperties": {"type": "string"}}
    assert kinds(obj(a={}), {**obj(a={}), **typed}) == [("constraint_added", "", True)]
    assert kinds({**obj(a={}), **typed}, obj(a={})) == [("constraint_removed", "", False)]
    assert kinds({**obj(a={}), **typed}, obj(closed=True, a={})) == [("closed", "", True)]


def test_a_new_optional_field_with_a_schema_breaks_unless_the_old_schema_refused_it() -> None:
    [change] = schema_changes(obj(a={}), obj(a={}, note={"type": "string"}))
    assert (change.kind, change.path, change.breaking) == ("property_added", "note", True)
    assert "may refuse inputs the old schema accepted" in change.message
    assert kinds(obj(closed=True, a={}), obj(closed=True, a={}, note={"type": "string"})) == [
        ("property_added", "note", False)
    ]


def test_a_property_removed_while_others_are_constrained_breaks() -> None:
    typed = {"additionalProperties": {"type": "integer"}}
    assert kinds({**obj(a={}, b={}), **typed}, {**obj(a={}), **typed}) == [
        ("property_removed", "b", True)
    ]
    closed_by_pattern = {**obj(closed=True), "patternProperties": {"^x": {}}}
    assert kinds(closed_by_pattern, obj(closed=True)) == [("constraint_removed", "", True)]


def test_annotations_are_no_schema_changes() -> None:
    old = obj(a={"type": "string", "title": "A", "examples": ["x"]})
    new = obj(a={"type": "string", "description": "an a", "deprecated": True})
    assert kinds(old, new) == []


def test_defs_changes_break_because_refs_are_not_followed() -> None:
    old = {**obj(a={"$ref": "#/$defs/code"}), "$defs": {"code": {"type": "string"}}}
    new = {**obj(a={"$ref": "#/$defs/code"}), "$defs": {"code": {"type": "integer"}}}
    assert kinds(old, new) == [("constraint_changed", "", True)]


def test_schema_removed_does_not_break() -> None:
    assert kinds(obj("a", a={}), None) == [("schema_removed", "", False)]


def test_flow_change_breaking_and_describe() -> None:
    old = {**flow(a={}), "input_schema": obj(a={"type": "integer"})}
    new = {
        **flow(a={}),
        "input_schema": obj("region", a={"type": "number"}, region={"type": "string"}),
    }
    change = compare(old, new)
    assert change.breaking
    lines = describe_change(change)
    assert lines == [
        "! input_schema: new required field 'region' has no default (breaking)",
        "~ input_schema: type of field 'a' widened: integer -> number",
    ]
    widened_only = {**new, "input_schema": obj(a={"type": "number"})}
    assert not compare(old, widened_only).breaking


def test_input_schema_change_without_a_detected_difference_is_still_shown() -> None:
    old = {**flow(a={}), "input_schema": obj(a={"type": "string"})}
    new = {**flow(a={}), "input_schema": obj(a={"type": "string", "description": "a name"})}
    change = compare(old, new)
    assert change.schema == ()
    assert describe_change(change) == ["~ input_schema changed"]


# --- JSON and text ------------------------------------------------------------------


def test_to_json_keys_and_shapes() -> None:
    old = {**flow(a={}, gone={}), "schedules": [{"name": "s", "cron": "@daily"}]}
    new = {
        **flow(a={"timeout": 5}, b={}),
        "description": "d",
        "input_schema": obj("r", r={}),
        "schedules": [{"name": "s", "cron": "@hourly", "input": {"r": 1}}],
    }
    out = compare(old, new).to_json()
    assert list(out) == [
        "name",
        "status",
        "breaking",
        "nodes_added",
        "nodes_removed",
        "nodes_changed",
        "flow_fields",
        "schedules",
        "schema",
    ]
    assert out["status"] == "changed" and out["breaking"] is True
    assert out["nodes_added"] == [{"name": "b", "type": "action", "call": "m:f"}]
    assert out["nodes_removed"] == [{"name": "gone", "type": "action", "call": "m:f"}]
    assert out["nodes_changed"] == [
        {"name": "a", "fields": [{"field": "timeout", "old": None, "new": 5.0}]}
    ]
    assert out["flow_fields"][0] == {"field": "description", "old": None, "new": "d"}
    assert out["schedules"] == [
        {
            "name": "s",
            "change": "changed",
            "old": {"cron": "@daily", "timezone": "UTC", "input": None},
            "new": {"cron": "@hourly", "timezone": "UTC", "input": {"r": 1}},
        }
    ]
    assert set(out["schema"][0]) == {"path", "kind", "breaking", "message"}
    assert json.loads(json.dumps(out)) == out


def test_unchanged_to_json() -> None:
    out = compare(flow(a={}), flow(a={})).to_json()
    assert out["status"] == "unchanged" and out["breaking"] is False
    assert all(out[k] == [] for k in ("nodes_added", "nodes_changed", "schedules", "schema"))


def test_source_diff() -> None:
    assert source_diff("a\n", "a\n", "x", "y") == ""
    diff = source_diff("a\nb\n", "a\nc\n", "old.yaml", "new.yaml")
    assert diff.splitlines() == [
        "--- old.yaml",
        "+++ new.yaml",
        "@@ -1,2 +1,2 @@",
        " a",
        "-b",
        "+c",
    ]
    assert diff.endswith("\n")
    assert source_diff(None, "a\n").splitlines()[-1] == "+a"


def test_source_diff_marks_a_missing_final_newline() -> None:
    assert source_diff("a\nb", "a\nb\n", "x", "y").splitlines()[2:] == [
        "@@ -1,2 +1,2 @@",
        " a",
        "-b",
        "\\ No newline at end of file",
        "+b",
    ]


def test_source_diff_splits_at_newlines_only() -> None:
    diff = source_diff("a: '\x0c'\u2028\nb\n", "a: '\x0c'\u2028\nc\n", "x", "y")
    assert diff.split("\n")[2:7] == ["@@ -1,2 +1,2 @@", " a: '\x0c'\u2028", "-b", "+c", ""]


def test_describe_change_lines() -> None:
    old = {**flow(charge={"retry": {"max_attempts": 3}, "timeout": "30s"}, old={})}
    new = {
        **flow(
            charge={"retry": {"max_attempts": 5}, "timeout": "1m"},
            ship={"type": "fan_out", "over": "${{ run.input.items }}"},
        )
    }
    assert describe_change(compare(old, new)) == [
        "+ node ship (fan_out)",
        "- node old",
        "~ node charge: retry.max_attempts 3 -> 5, timeout 30s -> 1m",
    ]


def test_describe_long_values_are_cut() -> None:
    change = compare(flow(a={"input": "x" * 200}), flow(a={"input": "y"}))
    [line] = describe_change(change)
    assert "…" in line and len(line) < 150


def test_describe_limits_and_unset_keys() -> None:
    old = flow(a={"concurrency": {"limit": 2}})
    new = flow(a={"concurrency": {"limit": 3, "group": "g"}})
    [line] = describe_change(compare(old, new))
    assert line == "~ node a: concurrency.group 'f.a' -> 'g', concurrency.limit 2 -> 3"
    old_defaults = {**flow(a={}), "defaults": {"queue": "q"}}
    new_defaults = {**flow(a={}), "defaults": {"queue": "q", "priority": 2}}
    lines = describe_change(compare(old_defaults, new_defaults))
    assert "~ defaults.priority unset -> 2" in lines

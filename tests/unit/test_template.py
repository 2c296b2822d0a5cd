from __future__ import annotations

import pytest

from cyclone_flow.errors import TemplateError
from cyclone_flow.flowfile.template import Ref, parse_ref, references, render

OUTPUTS = {"fetch": {"total": 12, "items": [{"sku": "a"}, {"sku": "b"}]}, "empty": None}


def upstream(name: str) -> object:
    return OUTPUTS[name]


def test_render_replaces_whole_string_references() -> None:
    template = {
        "id": "${{ run.input.order.id }}",
        "all": "${{run.input}}",
        "total": "${{  nodes.fetch.output.total  }}",
        "sku": "${{ nodes.fetch.output.items.1.sku }}",
        "out": ["${{ nodes.fetch.output }}", 3, None, "plain"],
    }
    run_input = {"order": {"id": 7}}
    assert render(template, run_input, upstream) == {
        "id": 7,
        "all": run_input,
        "total": 12,
        "sku": "b",
        "out": [OUTPUTS["fetch"], 3, None, "plain"],
    }


def test_render_does_not_mutate_and_keeps_scalars() -> None:
    template = {"a": [1, {"b": True}]}
    assert render(template, {}, upstream) == template
    assert render(5, {}, upstream) == 5


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("${{ run.input.missing }}", "has no key 'missing'"),
        ("${{ nodes.fetch.output.items.5 }}", "out of range"),
        ("${{ nodes.fetch.output.items.x }}", "not an index"),
        ("${{ nodes.fetch.output.total.x }}", "is a int"),
        ("${{ nodes.empty.output.x }}", "is a null"),
        ("total: ${{ run.input }}", "malformed"),
        ("${{ node.x.output }}", "malformed"),
    ],
)
def test_render_errors_name_the_expression(expr: str, fragment: str) -> None:
    with pytest.raises(TemplateError, match=fragment) as info:
        render({"x": [expr]}, {"a": 1}, upstream)
    assert expr in str(info.value) or expr.strip("${} ").split(" ")[0] in str(info.value)


def test_numeric_segment_is_a_key_on_mappings() -> None:
    assert render("${{ run.input.0 }}", {"0": "zero"}, upstream) == "zero"


def test_references_lists_every_reference_in_order() -> None:
    refs = references({"a": "${{ run.input.x.0 }}", "b": ["${{ nodes.n.output }}", "no"]})
    assert refs == [
        Ref("run", None, ("x", "0"), "${{ run.input.x.0 }}"),
        Ref("nodes", "n", (), "${{ nodes.n.output }}"),
    ]
    assert refs[0].expression == "run.input.x.0"
    assert parse_ref("plain") is None


def test_item_references_render_the_fan_out_element() -> None:
    template = {"whole": "${{ item }}", "part": "${{ item.files.1 }}", "run": "${{ run.input.x }}"}
    item = {"files": ["a.csv", "b.csv"]}
    assert render(template, {"x": 1}, upstream, item) == {
        "whole": item,
        "part": "b.csv",
        "run": 1,
    }
    assert parse_ref("${{ item.a }}") == Ref("item", None, ("a",), "${{ item.a }}")
    whole = parse_ref("${{ item }}")
    assert whole is not None and whole.expression == "item"
    with pytest.raises(TemplateError, match="index 5 is out of range"):
        render("${{ item.files.5 }}", None, upstream, item)

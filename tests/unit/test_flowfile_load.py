from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from cyclone_flow.errors import FlowError
from cyclone_flow.flowfile import (
    LintPathError,
    lint_paths,
    load_flow,
    load_flow_text,
    to_dot,
    to_mermaid,
)
from cyclone_flow.flowfile.build import document_digest
from cyclone_flow.flowfile.model import Backoff, Retry

GOOD = Path(__file__).parent / "fixtures" / "good" / "order.yaml"


def codes(text: str) -> list[tuple[str, int, int]]:
    with pytest.raises(FlowError) as info:
        load_flow_text(textwrap.dedent(text), "f.yaml")
    return [(p.code, p.line, p.col) for p in info.value.problems]


def test_good_flow_loads_with_defaults_applied() -> None:
    flow = load_flow(GOOD)
    assert flow.name == "order-fulfilment"
    assert list(flow.nodes) == ["fetch", "charge", "ship_each", "approval", "notify"]
    fetch, charge = flow.nodes["fetch"], flow.nodes["charge"]
    assert fetch.type == "action"
    assert fetch.call == "shop.handlers:fetch_order"
    assert fetch.queue == "default"
    assert fetch.timeout_s == 300.0
    assert fetch.retry == Retry(max_attempts=3)
    assert fetch.input == {"order_id": "${{ run.input.order_id }}"}
    assert charge.needs == ("fetch",)
    assert charge.timeout_s == 30.0
    assert charge.retry == Retry(5, Backoff(initial_s=1.0, max_s=60.0))
    ship = flow.nodes["ship_each"]
    assert ship.type == "fan_out"
    assert ship.options == {"over": "${{ nodes.fetch.output.items }}", "max_parallel": 10}
    assert flow.nodes["approval"].options == {"signal": "approved", "max_wait": "24h"}
    assert flow.nodes["approval"].call is None
    assert flow.nodes["notify"].on_dep_failure == "cancel_branch"
    assert flow.input_schema == {"type": "object", "required": ["order_id"]}
    assert flow.path == str(GOOD)
    assert flow.leaves() == ["notify"]
    assert flow.dependents("fetch") == ["charge", "ship_each"]


def test_digest_is_sha256_of_canonical_document() -> None:
    document = dict(load_flow(GOOD).document)
    document["nodes"] = {k: v for k, v in document["nodes"].items() if k != "notify"}
    flow = load_flow_text(json.dumps(document))  # without its child node
    assert "defaults" in flow.document  # defaults are not applied to the document
    assert flow.digest == document_digest(flow.document)
    import hashlib

    canonical = json.dumps(flow.document, sort_keys=True, separators=(",", ":"))
    assert flow.digest == hashlib.sha256(canonical.encode()).hexdigest()
    # the digest ignores formatting and comments
    again = load_flow_text("# c\n" + json.dumps(flow.document))
    assert again.digest == flow.digest


def test_child_flows_are_loaded_and_covered_by_the_digest(tmp_path: Path) -> None:
    parent = tmp_path / "parent.yaml"
    parent.write_text("name: parent\nnodes:\n  sub: {type: child, flow: sub/child.yaml}\n")
    (tmp_path / "sub").mkdir()
    child = tmp_path / "sub" / "child.yaml"
    child.write_text("name: child\nnodes:\n  a: {call: 'm:f'}\n")
    flow = load_flow(parent)
    assert flow.children["sub"].name == "child"
    assert flow.children["sub"].path == str(child)
    assert [f.name for f in flow.tree()] == ["parent", "child"]
    assert flow.digest != document_digest(flow.document)
    child.write_text("name: child\nnodes:\n  a: {call: 'm:g'}\n")
    changed = load_flow(parent)
    assert changed.document == flow.document
    assert changed.digest != flow.digest  # a changed child is a new parent definition


def test_retry_merges_defaults_key_by_key() -> None:
    flow = load_flow_text(
        textwrap.dedent(
            """\
            name: r
            defaults: {retry: {max_attempts: 4, backoff: {max: 1m}}, priority: 3, queue: q1}
            nodes:
              a: {call: "m:f", retry: {backoff: {initial: 500ms}}, queue: q2}
            """
        )
    )
    node = flow.nodes["a"]
    assert node.retry == Retry(4, Backoff(initial_s=0.5, max_s=60.0))
    assert (node.priority, node.queue, node.timeout_s) == (3, "q2", None)


def test_anchors_and_merge_keys() -> None:
    text = textwrap.dedent(
        """\
        name: merged
        nodes:
          a: &base
            call: shop.handlers:step
            retry: {max_attempts: 2}
          b:
            <<: *base
            needs: [a]
            input: &in {k: 1}
          c:
            <<: *base
            call: shop.handlers:other
            input: *in
        """
    )
    flow = load_flow_text(text)
    assert flow.nodes["b"].call == "shop.handlers:step"
    assert flow.nodes["b"].retry.max_attempts == 2
    assert flow.nodes["c"].call == "shop.handlers:other"
    assert flow.nodes["c"].input == {"k": 1}
    assert flow.document["nodes"]["b"]["call"] == "shop.handlers:step"
    # an error inside a merged-in key is reported in the anchored mapping
    bad = text.replace("retry: {max_attempts: 2}", "retry: {max_attempts: 0}")
    assert set(codes(bad)) == {("E003", 5, 27)}


def test_duplicate_key_message_names_key_and_line() -> None:
    with pytest.raises(FlowError) as info:
        load_flow_text("name: a\nnodes: {}\nname: b\n", "dup.yaml")
    assert str(info.value) == (
        "dup.yaml:3:1: error[E002]: duplicate key 'name': keys must be unique within a mapping"
    )


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", "E005"),
        ("   \n", "E005"),
        ("42", "E005"),
        ("'just a string'", "E005"),
        ("a: 1\n---\nb: 2\n", "E001"),
        ("a: \x00", "E001"),
        ("[" * 3000, "E001"),
        ("a: " + "[" * 150 + "]" * 150, "E001"),
        ("a: !!set {x, y}", "E004"),
        ("a: !custom 1", "E004"),
        ("a: !custom {b: 1}", "E004"),
        ("a: .nan", "E004"),
        ("a: !!binary aGVsbG8=", "E004"),
        ("1: x", "E004"),
        ("? [a]\n: x", "E004"),
        ("a: *undefined", "E001"),
    ],
)
def test_bad_yaml_becomes_flow_error(text: str, code: str) -> None:
    with pytest.raises(FlowError) as info:
        load_flow_text(text)
    assert info.value.problems[0].code == code


def test_alias_bomb_is_rejected() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    with pytest.raises(FlowError) as info:
        load_flow_text("\n".join(lines))
    assert info.value.problems[0].code == "E001"


def test_unreadable_and_binary_files(tmp_path: Path) -> None:
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"name: x\n\xff\xfe\x00garbage")
    with pytest.raises(FlowError) as info:
        load_flow(binary)
    assert [(p.code, p.line, p.col) for p in info.value.problems] == [("E000", 2, 1)]
    with pytest.raises(FlowError) as info:
        load_flow(tmp_path / "missing.yaml")
    assert info.value.problems[0].code == "E000"
    with pytest.raises(FlowError):
        load_flow(tmp_path)  # a directory


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbfname: bom\nnodes: {a: {call: 'm:f'}}\n")
    assert load_flow(path).name == "bom"


def test_lint_paths_missing_path_raises() -> None:
    with pytest.raises(LintPathError) as info:
        lint_paths(["/definitely/not/here.yaml"])
    assert info.value.exit_code == 2


def test_graph_renderings() -> None:
    flow = load_flow(GOOD)
    mermaid = to_mermaid(flow)
    assert mermaid.startswith("flowchart TD\n")
    assert "    fetch --> charge\n" in mermaid
    assert "ship_each[[" in mermaid
    dot = to_dot(flow)
    assert dot.startswith('digraph "order-fulfilment" {')
    assert '    "charge" -> "notify";' in dot


@pytest.fixture
def handlers(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "lint_handlers_mod.py").write_text(
        textwrap.dedent(
            """\
            from os.path import join
            NOT_CALLABLE = 3
            def good(ctx, input):
                return input
            def too_few(ctx):
                return None
            async def coro(ctx, input):
                return input
            async def agen(ctx, input):
                yield input
            """
        )
    )
    (tmp_path / "lint_broken_mod.py").write_text("raise RuntimeError('boom')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("lint_handlers_mod", "lint_broken_mod"):
            sys.modules.pop(name, None)


def test_check_imports(handlers: Path) -> None:
    flow_file = handlers / "flow.yaml"
    flow_file.write_text(
        textwrap.dedent(
            """\
            name: imports
            nodes:
              ok: {call: "lint_handlers_mod:good"}
              e020: {call: "lint_broken_mod:f"}
              e020b: {call: "no_such_module_xyz:f"}
              e021: {call: "lint_handlers_mod:missing"}
              e022: {call: "lint_handlers_mod:NOT_CALLABLE"}
              e023: {call: "lint_handlers_mod:too_few"}
              e024: {call: "lint_handlers_mod:good.__call__"}
              e024b: {call: "lint_handlers_mod:join"}
              e023b: {call: "lint_handlers_mod:agen"}
              coro: {call: "lint_handlers_mod:coro"}
            """
        )
    )
    assert lint_paths([str(flow_file)]) == []
    found = [(p.code, p.line, p.col) for p in lint_paths([str(flow_file)], check_imports=True)]
    assert found == [
        ("E020", 4, 16),
        ("E020", 5, 17),
        ("E021", 6, 16),
        ("E022", 7, 16),
        ("E023", 8, 16),
        ("E024", 9, 16),
        ("E024", 10, 17),
        ("E023", 11, 17),
    ]  # async def (node coro) passes: E025 is retired
    messages = [p.message for p in lint_paths([str(flow_file)], check_imports=True)]
    assert "a part starting with '_'" in messages[-3]
    assert "defined in module 'posixpath'" in messages[-2]
    assert "is an async generator function" in messages[-1]
    assert (
        "a handler takes two positional parameters, e.g. def too_few(ctx, input)" in (messages[4])
    )


def test_mermaid_labels_escape_angle_brackets_and_hashes() -> None:
    """A note holding markup (a ``when:`` text read back by ``graph --run``) stays text in
    Mermaid's HTML labels: ``<``, ``>``, ``#`` and ``"`` become entity codes."""
    from cyclone_flow.flowfile import load_flow_text
    from cyclone_flow.flowfile.diagram import to_mermaid

    flow = load_flow_text("name: g\nnodes:\n  b: {call: 'm:f'}\n")
    text = to_mermaid(flow, {"b": 'skipped: when "x<y>" #1 <script>'}, {"b": "skipped"})
    label = next(line for line in text.splitlines() if "skipped: when" in line)
    assert "<script>" not in label and "x<y>" not in label
    assert "#lt;script#gt;" in label and "#35;1" in label and "#quot;x#lt;y#gt;#quot;" in label


def test_the_flowfile_graph_module_is_a_deprecated_alias() -> None:
    import importlib
    import warnings

    from cyclone_flow.flowfile import diagram

    old = importlib.import_module("cyclone_flow.flowfile.graph")
    with pytest.warns(DeprecationWarning, match=r"cyclone_flow\.flowfile\.diagram"):
        assert old.to_mermaid is diagram.to_mermaid
    with pytest.warns(DeprecationWarning, match=r"cyclone_flow\.flowfile\.graph is deprecated"):
        from cyclone_flow.flowfile.graph import to_dot
    assert to_dot is diagram.to_dot
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert diagram.to_dot is not None  # the new path does not warn

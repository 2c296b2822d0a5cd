"""load_flow_text on arbitrary text and YAML-ish structures: a Flow or a FlowError, never else.

The hostile corpus puts strings that reach the file system, zoneinfo or
Postgres into every field: very long ones, NUL escapes, lone surrogates, paths no file
system opens, and numbers no float holds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from cyclone_flow.errors import FlowError
from cyclone_flow.flowfile import Flow, lint_paths, lint_text, load_flow_text

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KEYS = st.sampled_from(
    [
        "name",
        "nodes",
        "call",
        "needs",
        "input",
        "type",
        "over",
        "retry",
        "timeout",
        "a",
        "b",
        "defaults",
        "queue",
        "signal",
        "flow",
        "max_attempts",
        "backoff",
        "<<",
        "${{",
        "schedules",
        "cron",
        "timezone",
        "description",
        "input_schema",
        "$schema",
        "multiplier",
        "initial",
        "jitter",
        "max_parallel",
        "\x00",
        "\ud800",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "m:f",
            "a",
            "b",
            "${{ nodes.a.output }}",
            "${{ run.input.x }}",
            "5m",
            "0s",
            "fan_out",
            "child",
            "wait_signal",
            "2024-01-01",
            "*x",
            "&x y",
            "\x00",
            "a\x00b.yaml",
            "\ud800",
            "\udcff",
            "Europe/Paris",
            "A" * 300,
            "d/" * 3000,
            "0 * * * *",
            "default\n",
            1.0e-320,
            5e-324,
            1.0e308,
            10**400,
        ]
    ),
)
DOCS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(KEYS, st.text(max_size=8)), inner, max_size=5),
    ),
    max_leaves=30,
)


def _check(text: str) -> None:
    try:
        result = load_flow_text(text)
    except FlowError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.line >= 1 and problem.col >= 1
            assert problem.code.startswith("E")
            str(problem).encode("utf-8")  # printable as it is: no NUL, no lone surrogate
            assert len(problem.message) <= 2100
    else:
        assert isinstance(result, Flow)
        json.dumps(result.document).encode("utf-8")


@FUZZ
@given(st.text(max_size=300))
def test_random_text(text: str) -> None:
    _check(text)


@FUZZ
@given(DOCS)
def test_random_structures_as_yaml(doc: object) -> None:
    _check(json.dumps(doc, allow_nan=True))


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d"]),
        st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=3),
        min_size=1,
    ),
    st.sampled_from(["", "    input: {v: '${{ nodes.b.output.x }}'}\n"]),
)
def test_random_graphs(needs: dict[str, list[str]], extra: str) -> None:
    lines = ["name: g", "nodes:"]
    for name, deps in needs.items():
        lines += [f"  {name}:", "    call: m:f", f"    needs: {json.dumps(deps)}"]
    _check("\n".join(lines) + "\n" + extra)


@FUZZ
@given(DOCS)
def test_random_structures_as_block_yaml(doc: object) -> None:
    import io

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    stream = io.StringIO()
    try:
        yaml.dump(doc, stream)
    except Exception:
        return
    _check(stream.getvalue())


# -- the hostile corpus: every field given every hostile value ----------------------------

_LONG = 100_000
HOSTILE_VALUES = {
    "nul": '"\\0"',
    "nul-x00": '"a\\x00b"',
    "nul-u0000": '"\\u0000"',
    "surrogate": '"\\ud800"',
    "surrogate-pair-escape": '"\\ud83d\\ude00"',
    "surrogate-path": '"\\udcff.yaml"',
    "long-256": '"' + "A" * 300 + '"',
    "long-path": '"' + "d/" * 3000 + 'x.yaml"',
    "long-component": '"' + "c" * 300 + '.yaml"',
    "very-long": '"' + "x" * _LONG + '"',
    "very-long-multibyte": '"' + "\U0001f600" * 5000 + '"',
    "newline": '"ok\\n"',
    "denormal": "1.0e-320",
    "huge-float": "1.0e+308",
    "huge-int": "9" * 400,
    "negative": "-1",
}


def _top(extra: str) -> str:
    return "name: x\n" + extra + "\nnodes:\n  a: {{call: 'm:f'}}\n"


def _node(extra: str) -> str:
    return "name: x\nnodes:\n  a: {{" + extra + "}}\n"


def _action(extra: str) -> str:
    return _node("call: 'm:f', " + extra)


def _schedule(extra: str) -> str:
    return _top("schedules:\n  - {{cron: '0 * * * *', " + extra + "}}")


HOSTILE_FIELDS = {
    "name": "name: {v}\nnodes:\n  a: {{call: 'm:f'}}\n",
    "description": _top("description: {v}"),
    "node-name": "name: x\nnodes:\n  {v}: {{call: 'm:f'}}\n",
    "call": _node("call: {v}"),
    "needs": _action("needs: [{v}]"),
    "input-literal": _action("input: {{x: [{v}]}}"),
    "input-key": _action("input: {{{v}: 1}}"),
    "input-template": _action('input: {{x: "${{{{ run.input.{k} }}}}"}}'),
    "queue": _action("queue: {v}"),
    "default-queue": _top("defaults: {{queue: {v}}}"),
    "signal": _node("type: wait_signal, signal: {v}"),
    "child-flow": _node("type: child, flow: {v}"),
    "over": _node("type: fan_out, call: 'm:f', over: [{v}]"),
    "max-parallel": _node("type: fan_out, call: 'm:f', over: [1], max_parallel: {v}"),
    "timeout": _action("timeout: {v}"),
    "deadline": _top("deadline: {v}"),
    "backoff-initial": _action("retry: {{max_attempts: 3, backoff: {{initial: {v}, max: 5m}}}}"),
    "backoff-max": _action("retry: {{backoff: {{initial: 0, max: {v}}}}}"),
    "backoff-multiplier": _action("retry: {{backoff: {{multiplier: {v}}}}}"),
    "backoff-jitter": _action("retry: {{backoff: {{jitter: {v}}}}}"),
    "max-attempts": _action("retry: {{max_attempts: {v}}}"),
    "input-schema": _top("input_schema: {{properties: {{p: {{pattern: {v}}}}}}}"),
    "input-schema-key": _top("input_schema: {{properties: {{{v}: {{type: string}}}}}}"),
    "dollar-schema": _top("input_schema: {{$schema: {v}}}"),
    "schedule-cron": _top("schedules:\n  - {{cron: {v}}}"),
    "schedule-timezone": _schedule("timezone: {v}"),
    "schedule-name": _schedule("name: {v}"),
    "schedule-input": _schedule("input: {{x: {v}}}"),
}
HOSTILE_CASES = [
    pytest.param(field, value, id=f"{field}-{vid}")
    for field, field_text in HOSTILE_FIELDS.items()
    for vid, value in HOSTILE_VALUES.items()
]


@pytest.mark.parametrize(("field", "value"), HOSTILE_CASES)
def test_hostile_values_in_every_field(field: str, value: str) -> None:
    """Only Problems (or a Flow) come out of lint, with a printable message; a NUL or a lone
    surrogate is always a problem (E008), wherever it is."""
    text = HOSTILE_FIELDS[field].format(v=value, k=value.strip('"'))
    _check(text)
    if any(marker in value for marker in ("\\0", "\\x00", "\\u0000", "\\ud8", "\\udc")):
        problems = lint_text(text)
        assert problems and any(p.code in ("E008", "E001") for p in problems), problems


@pytest.mark.parametrize("name", ["a" * 300, "d/" * 3000, "\udcff"])
def test_hostile_child_flow_file_names(tmp_path: Path, name: str) -> None:
    """A child path relative to a real file, too long or not encodable for the file
    system, is a lint problem (E003/E008/E030), not an OSError or a ValueError."""
    parent = tmp_path / "parent.yaml"
    escaped = json.dumps(name)  # a YAML double-quoted string is a JSON string
    parent.write_text(f"name: p\nnodes:\n  sub: {{type: child, flow: {escaped}}}\n", "utf-8")
    problems = lint_paths([str(parent)])
    assert problems and {p.code for p in problems} <= {"E003", "E008", "E030"}
    assert os.path.exists(parent)

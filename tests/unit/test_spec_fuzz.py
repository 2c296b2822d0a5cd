"""load_flow_text on arbitrary text and YAML-ish structures: a Flow or a FlowError, never else."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from cyclone_flow.errors import FlowError
from cyclone_flow.spec import Flow, load_flow_text

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
    else:
        assert isinstance(result, Flow)
        json.dumps(result.document)


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

"""The engine's JSON encoding of inputs, outputs and signals: a value nested too deeply is
a clear ValueError, never a RecursionError, and the NUL check works at any depth."""

from __future__ import annotations

from typing import Any

import pytest

from cyclone_flow._json import contains_nul, dumps


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = [{"k": value}]
    return value


def test_contains_nul_at_any_depth() -> None:
    assert contains_nul(_nested(20_000, "a\x00b"))
    assert not contains_nul(_nested(20_000, "ab"))
    assert contains_nul({"key\x00": 1}) and not contains_nul({"key": [1, 2.5, None, True]})


def test_dumps_of_a_too_deep_value_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        dumps(_nested(20_000, 1))
    assert dumps(_nested(3, "é")) == '[{"k":[{"k":[{"k":"é"}]}]}]'

"""A handler module edited after a worker imported it: the missing attribute's
error says the worker loaded its code at start and names the way out (restart, or
``cyclone-flow worker --reload``); an attribute missing from an unchanged file does not."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cyclone_flow.handlers import AllowList, HandlerImportError, HandlerResolver


@pytest.fixture
def module(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    name = f"stale_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.py"
    path.write_text("def first(ctx, input):\n    return 1\n", encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        yield name, path
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_an_attribute_added_after_the_import_names_the_stale_code(
    module: tuple[str, Path],
) -> None:
    name, path = module
    resolver = HandlerResolver(AllowList(prefixes=[name]))
    assert resolver.resolve(f"{name}:first")(None, None) == 1
    path.write_text("def first(ctx, input):\n    return 1\n\ndef gate(ctx, input):\n    return 2\n")
    later = time.time() + 5
    os.utime(path, (later, later))
    with pytest.raises(HandlerImportError) as info:
        resolver.resolve(f"{name}:gate")
    assert info.value.reason == "attribute"
    message = str(info.value)
    assert "has no attribute 'gate'" in message
    assert "imported" in message and "restart it or run `cyclone-flow worker --reload`" in message


def test_a_missing_attribute_of_an_unchanged_module_has_no_reload_hint(
    module: tuple[str, Path],
) -> None:
    name, _ = module
    resolver = HandlerResolver(AllowList(prefixes=[name]))
    with pytest.raises(HandlerImportError) as info:
        resolver.resolve(f"{name}:nope")
    assert "--reload" not in str(info.value) and "has no attribute 'nope'" in str(info.value)

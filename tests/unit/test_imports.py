"""Handler resolution under the worker's module allow-list (no database)."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from cyclone_flow.worker.imports import AllowList, HandlerImportError, HandlerResolver


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("shop", True),
        ("shop.handlers", True),
        ("shop.handlers.deep", True),
        ("shopping", False),
        ("shop_extra", False),
        ("sho", False),
        ("other.shop", False),
        ("", False),
    ],
)
def test_prefix_semantics(module: str, allowed: bool) -> None:
    assert AllowList(prefixes=["shop"]).allows(module) is allowed


def test_prefix_with_trailing_dot_and_blanks() -> None:
    allow = AllowList(prefixes=["shop.", "  ", "pkg.sub "])
    assert allow.prefixes == ("shop", "pkg.sub")
    assert allow.allows("shop.x") and allow.allows("pkg.sub.y")
    assert not allow.allows("pkg") and not allow.allows("pkg.subway")


def test_exact_semantics() -> None:
    allow = AllowList(exact=["pkg.handlers"])
    assert allow.allows("pkg.handlers")
    assert not allow.allows("pkg")
    assert not allow.allows("pkg.handlers.sub")
    assert not allow.allows("pkg.handlers2")


def test_allow_all_and_empty() -> None:
    assert AllowList(allow_all=True).allows("anything.at.all")
    empty = AllowList()
    assert not empty.allows("os")
    assert "--allow-module" in empty.describe()
    assert AllowList(prefixes=["b", "a"], exact=["c"]).describe() == "a, b, c"


@pytest.fixture
def fresh_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """An importable module that records its import in a marker file."""
    name = f"cyclone_probe_{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "imported"
    (tmp_path / f"{name}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('yes')\n"
        "def handler(ctx, input):\n    return input\n"
        "VALUE = 42\n"
        "class Box:\n    inner = staticmethod(lambda ctx, input: input)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, marker
    sys.modules.pop(name, None)


def test_disallowed_module_is_never_imported(fresh_module: tuple[str, Path]) -> None:
    name, marker = fresh_module
    resolver = HandlerResolver(AllowList(prefixes=["somewhere_else"]))
    with pytest.raises(HandlerImportError, match="not allowed on this worker") as info:
        resolver.resolve(f"{name}:handler")
    assert "it was not imported" in str(info.value)
    assert name not in sys.modules
    assert not marker.exists()


def test_allowed_module_is_imported_and_cached(fresh_module: tuple[str, Path]) -> None:
    name, marker = fresh_module
    resolver = HandlerResolver(AllowList(exact=[name]))
    handler = resolver.resolve(f"{name}:handler")
    assert handler(None, 5) == 5
    assert marker.exists() and name in sys.modules
    assert resolver.resolve(f"{name}:handler") is handler
    assert resolver.resolve(f"{name}:Box.inner")(None, "x") == "x"


@pytest.mark.parametrize(
    "call",
    ["", "no_colon", "module:", ":func", "a.b", ":"],
)
def test_bad_call_strings(call: str) -> None:
    resolver = HandlerResolver(AllowList(allow_all=True))
    with pytest.raises(HandlerImportError, match=r"package\.module:function"):
        resolver.resolve(call)


def test_missing_module() -> None:
    resolver = HandlerResolver(AllowList(allow_all=True))
    with pytest.raises(HandlerImportError, match="cannot import module"):
        resolver.resolve(f"no_such_module_{uuid.uuid4().hex[:8]}:f")


def test_missing_attribute(fresh_module: tuple[str, Path]) -> None:
    name, _ = fresh_module
    resolver = HandlerResolver(AllowList(prefixes=[name]))
    with pytest.raises(HandlerImportError, match="has no attribute 'nope'"):
        resolver.resolve(f"{name}:nope")
    with pytest.raises(HandlerImportError, match=r"has no attribute 'Box\.missing'"):
        resolver.resolve(f"{name}:Box.missing")


def test_non_callable(fresh_module: tuple[str, Path]) -> None:
    name, _ = fresh_module
    resolver = HandlerResolver(AllowList(prefixes=[name]))
    with pytest.raises(HandlerImportError, match="is not callable"):
        resolver.resolve(f"{name}:VALUE")


def test_error_in_module_import_is_a_handler_import_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"cyclone_broken_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("raise RuntimeError('broken at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    resolver = HandlerResolver(AllowList(prefixes=[name]))
    try:
        with pytest.raises(HandlerImportError, match="RuntimeError: broken at import"):
            resolver.resolve(f"{name}:f")
    finally:
        sys.modules.pop(name, None)


def test_reexport_inside_the_handlers_package_is_allowed_but_not_from_another() -> None:
    resolver = HandlerResolver(AllowList(exact={"cyclone_test_handlers.basic"}))
    handler = resolver.resolve("cyclone_test_handlers.basic:reexported")
    assert handler(None, None) == {"reexported": True}
    with pytest.raises(HandlerImportError, match="defined in module 'posixpath'"):
        HandlerResolver(AllowList(prefixes=["cyclone_test_handlers"])).resolve(
            "cyclone_test_handlers.basic:path_join"
        )

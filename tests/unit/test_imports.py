"""Handler resolution under the worker's module allow-list (no database)."""

from __future__ import annotations

import contextlib
import importlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cyclone_test_handlers.bypass import BypassPackages, write_bypass_packages

from cyclone_flow.handlers import AllowList, HandlerImportError, HandlerResolver


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


# -- the attribute path after ':' (--allow-module cannot be bypassed through it) ---------


@pytest.fixture
def bypass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BypassPackages]:
    """``allowed_pkg_<id>.mod`` imports objects of ``evil_lib_<id>`` (not allowed), whose
    code writes ``packages.marker`` whenever it runs."""
    packages = write_bypass_packages(tmp_path, f"_{uuid.uuid4().hex[:8]}")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield packages
    for name in list(sys.modules):
        if name.partition(".")[0] in (packages.allowed, packages.evil, packages.deco):
            del sys.modules[name]


def _attempt(resolver: HandlerResolver, call: str) -> HandlerImportError | None:
    """Resolve ``call``; when that succeeds, call it as a worker would (its errors are
    ignored) and return None; else return the refusal."""
    try:
        handler = resolver.resolve(call)
    except HandlerImportError as exc:
        return exc
    with contextlib.suppress(Exception):
        handler(None, {"x": 1})
    return None


@pytest.mark.parametrize(
    ("path", "reason", "needle"),
    [
        ("do.__call__", "private", "'__call__'"),
        ("Evil", "foreign", "is defined in module '{evil}'"),
        ("system.__call__", "private", "'__call__'"),
        ("system", "foreign", "builtin defined in module 'posix'"),
        ("run.__call__", "private", "'__call__'"),
        ("run", "foreign", "is defined in module 'subprocess'"),
        ("Popen", "foreign", "is defined in module 'subprocess'"),
        ("__loader__.get_data", "private", "'__loader__'"),
        ("evil_partial", "foreign", "functools.partial of code defined in module '{evil}'"),
        ("sneaky", "foreign", "instance of a class defined in module '{evil}'"),
        ("caller", "foreign", "instance of a class defined in module '{evil}'"),
        ("send", "foreign", "method defined in module '{evil}'"),
        ("client.send", "foreign", "'client' is an instance of a class defined in"),
        ("CONFIG.update", "foreign", "instance of a class defined in module 'builtins'"),
        ("Handler.mro", "foreign", "'mro' is a descriptor defined in module 'builtins'"),
        # code inherited, run while walking, or behind a decorator
        ("inst_call", "foreign", "of a class whose base 'CallBase' is defined in module '{evil}'"),
        ("SubInit", "foreign", "is a class whose base 'InitBase' is defined in module '{evil}'"),
        ("SubNew", "foreign", "is a class whose base 'NewBase' is defined in module '{evil}'"),
        ("WithMeta", "foreign", "is a class whose metaclass 'Meta' is defined in module '{evil}'"),
        ("partial_sub", "foreign", "whose base 'partial' is defined in module 'functools'"),
        ("partial_sub_ok", "foreign", "whose base 'partial' is defined in module 'functools'"),
        ("ga.anything", "foreign", "'ga' is an instance of a class whose base 'GetattrBase'"),
        ("Holder.d", "foreign", "'d' is an instance of a class defined in module '{evil}'"),
        ("holder.d", "foreign", "'d' is an instance of a class defined in module '{evil}'"),
        ("holder.p", "foreign", "'p' is a property whose getter is defined in module '{evil}'"),
        ("Holder.p", "foreign", "'p' is a property whose getter is defined in module '{evil}'"),
        ("holder.call_attr", "foreign", "'call_attr' is a method defined in module '{evil}'"),
        ("Holder.call_attr", "foreign", "'call_attr' is defined in module '{evil}'"),
        ("assigned", "foreign", "class whose __call__ is defined in module '{evil}'"),
        ("liar", "foreign", "'liar' is an instance of a class defined in module '{evil}'"),
        ("liar.anything", "foreign", "'liar' is an instance of a class defined in module"),
        ("decorated", "foreign", "'decorated' is defined in module '{deco}'"),
        ("evil_decorated", "foreign", "'evil_decorated' is defined in module '{evil}'"),
        ("cached", "foreign", "'cached' is an instance of a class defined in module 'functools'"),
    ],
)
def test_allowed_module_does_not_lend_its_names_to_foreign_code(
    bypass: BypassPackages, path: str, reason: str, needle: str
) -> None:
    resolver = HandlerResolver(AllowList(prefixes=[bypass.allowed]))
    refused = _attempt(resolver, f"{bypass.allowed}.mod:{path}")
    assert not bypass.marker.exists(), f"foreign code ran: {bypass.marker.read_text()}"
    assert refused is not None, f"{path} resolved"
    assert refused.reason == reason
    assert needle.format(evil=bypass.evil, deco=bypass.deco) in str(refused)
    assert "not allowed on this worker" in str(refused) or reason == "private"


def test_globals_of_an_allowed_function_cannot_be_written(bypass: BypassPackages) -> None:
    resolver = HandlerResolver(AllowList(prefixes=[bypass.allowed]))
    mod = importlib.import_module(f"{bypass.allowed}.mod")
    refused = _attempt(resolver, f"{bypass.allowed}.mod:fn.__globals__.__setitem__")
    assert None not in vars(mod), "the call wrote into the module's globals"
    assert refused is not None and refused.reason == "private"
    assert "'__globals__'" in str(refused)
    assert mod.CONFIG == {"mode": "safe"}


@pytest.mark.parametrize("path", ["do.__call__", "_private", "ok._x", "Handler.__init__"])
def test_private_part_is_refused_before_anything_is_imported(
    bypass: BypassPackages, path: str
) -> None:
    resolver = HandlerResolver(AllowList(allow_all=True))  # even when everything is allowed
    with pytest.raises(HandlerImportError, match="may not have a part starting with '_'") as info:
        resolver.resolve(f"{bypass.allowed}.mod:{path}")
    assert info.value.reason == "private"
    assert "nothing was imported" in str(info.value)
    assert bypass.allowed not in sys.modules and bypass.evil not in sys.modules


@pytest.mark.parametrize(
    ("call", "output"),
    [
        ("{a}.mod:ok", {"ok": 7}),
        ("{a}.mod:handler_obj", {"called": 7}),  # a callable instance of an allowed class
        ("{a}.mod:handler_obj.method", {"method": 7}),
        ("{a}.mod:Handler.static", {"static": 7}),
        ("{a}.mod:Handler.klass", {"klass": 7}),
        ("{a}.mod:ok_partial", {"ok": 7}),  # partials of an allowed function
        ("{a}.mod:decorated_here", {"traced": {"ok": 7}}),  # a decorator of the package
        ("{a}.mod:dynamic", {"ok": 7}),  # the allowed module's own __getattr__
        ("{a}.mod:lazy.anything", {"ok": 7}),  # an allowed class's __getattr__
        ("{a}.mod:props.handler", {"ok": 7}),  # a property of an allowed class
        ("{a}.mod:DictHandler", {"got": 7}),  # a class with a builtin base
        ("{a}.mod:sub_handler", {"sub": 7}),  # re-exported from an allowed submodule
        ("{a}:sub_handler", {"sub": 7}),  # re-exported by the package's __init__
    ],
)
def test_handlers_defined_in_allowed_modules(
    bypass: BypassPackages, call: str, output: object
) -> None:
    resolver = HandlerResolver(AllowList(prefixes=[bypass.allowed]))
    assert resolver.resolve(call.format(a=bypass.allowed))(None, 7) == output
    instance = resolver.resolve(f"{bypass.allowed}.mod:Handler")(None, 7)  # a class
    assert instance.input == 7
    assert not bypass.marker.exists()


def test_prefix_allows_no_sibling_but_exact_allows_its_package(bypass: BypassPackages) -> None:
    call = f"{bypass.allowed}.sub:other_handler"  # defined in allowed_pkg.other
    narrow = HandlerResolver(AllowList(prefixes=[f"{bypass.allowed}.sub"]))
    with pytest.raises(HandlerImportError, match=rf"defined in module '{bypass.allowed}\.other'"):
        narrow.resolve(call)
    # `cyclone-flow run` allows exactly the modules its flow names, and a re-export
    # from inside their package (its own code), but nothing foreign
    run_like = HandlerResolver(AllowList(exact={f"{bypass.allowed}.sub", f"{bypass.allowed}.mod"}))
    assert run_like.resolve(call)(None, 1) == {"other": 1}
    assert _attempt(run_like, f"{bypass.allowed}.mod:do") is not None
    assert _attempt(run_like, f"{bypass.allowed}.mod:Popen") is not None
    assert not bypass.marker.exists()


def test_object_without_a_module_is_refused_unless_everything_is_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"cyclone_nomodule_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "class Handler:\n    __module__ = None\n"
        "    def __init__(self, ctx, input):\n        self.input = input\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(HandlerImportError, match="cannot be determined"):
            HandlerResolver(AllowList(prefixes=[name])).resolve(f"{name}:Handler")
        everything = HandlerResolver(AllowList(allow_all=True))
        assert everything.resolve(f"{name}:Handler")(None, 3).input == 3
    finally:
        sys.modules.pop(name, None)


LINT_BYPASSES = (
    "inst_call",
    "SubInit",
    "SubNew",
    "WithMeta",
    "partial_sub",
    "ga.anything",
    "Holder.d",
    "holder.d",
    "holder.p",
    "liar",
    "decorated",
    "evil_decorated",
    "cached",
)


def test_lint_check_imports_refuses_the_same_and_runs_no_foreign_code(
    bypass: BypassPackages, tmp_path: Path
) -> None:
    """`lint --check-imports` walks the path as a worker does (E024), running nothing of
    what it refuses, and accepts what a worker accepts."""
    from cyclone_flow.flowfile import lint_paths

    nodes = [f"  n{i}: {{call: '{bypass.allowed}.mod:{p}'}}" for i, p in enumerate(LINT_BYPASSES)]
    nodes += [f"  ok{i}: {{call: '{bypass.allowed}.mod:{p}'}}" for i, p in enumerate(OK_PATHS)]
    flow = tmp_path / "flow.yaml"
    flow.write_text("name: f\nnodes:\n" + "\n".join(nodes) + "\n")
    problems = lint_paths([str(flow)], check_imports=True)
    assert not bypass.marker.exists(), f"foreign code ran: {bypass.marker.read_text()}"
    assert [(p.code, p.line) for p in problems] == [
        ("E024", 3 + i) for i in range(len(LINT_BYPASSES))
    ]
    assert all("a worker refuses it" in p.message for p in problems)


OK_PATHS = ("ok", "handler_obj", "decorated_here", "dynamic", "lazy.anything", "props.handler")

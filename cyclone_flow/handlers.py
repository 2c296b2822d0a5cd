"""Resolve a node's ``call`` (``package.module:function``) to a Python callable, but only
under the module prefixes the worker was started with (worker security: a dotted path
outside them is a clear error on the step and is never imported).

Every object the attribute path reaches must be defined in an allowed module: not only
the module named before the ``:``, but each object after it (a function imported into an
allowed module from elsewhere, a foreign class, a bound method of a foreign object, a
``functools.partial`` of a foreign function, a builtin, ...). No part of the path may
start with ``_``, so ``fn.__call__``, ``fn.__globals__`` or ``__loader__`` are refused
before anything is imported.

What counts as "defined in": a plain function's home is the module whose globals it
runs in (``fn.__globals__["__name__"]``, not ``__module__``, which ``functools.wraps``
copies from the wrapped function: a foreign decorator's wrapper is foreign code). A class
(or the class of an instance) must be defined in an allowed module, and so must every
class of its MRO but ``object`` and the builtins (``dict``, ``Exception``: C code only)
and every class of its metaclass's MRO but ``type``: a class that inherits a foreign
``__call__``, ``__init__``, ``__new__`` or ``__getattr__``, or a foreign metaclass, is
foreign code, as is a subclass of ``functools.partial``.

The path is walked without running any code of the objects it meets (the way
:func:`inspect.getattr_static` looks attributes up: no descriptor ``__get__``, no
``__getattr__``, not even an object's ``__class__``): each raw attribute is checked first,
and only then bound here (plain functions, ``staticmethod``, ``classmethod``, C slots and
methods) or, for a property or another descriptor whose code is allowed, fetched with
``getattr``. A ``__getattr__`` is asked only when the object (a module, an instance, a
class) that defines it passed the check.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import shlex
import shutil
import sys
import threading
import types
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from cyclone_flow.errors import HandlerImportError as HandlerImportError
from cyclone_flow.text import did_you_mean

Handler = Callable[..., Any]

# What a walk may meet that wraps other code: unwrapped, never accepted on its own.
_BOUND_BUILTINS = (
    types.BuiltinMethodType,  # also builtin functions: their __self__ is their module
    types.MethodWrapperType,
)
_UNBOUND_BUILTINS = (
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
)
_MAX_UNWRAP = 32  # nested partials / methods deeper than this are refused
# bound by the walk itself (creating the result runs none of their code)
_BINDS_ALONE = (types.FunctionType, staticmethod, classmethod)
# the special methods a call of an instance, or of a class, runs (or an attribute lookup
# on it): each must be allowed code too, wherever the class got it from
_INSTANCE_HOOKS = ("__call__", "__getattribute__", "__getattr__")
_CLASS_HOOKS = ("__new__", "__init__")
_META_HOOKS = ("__call__", "__getattribute__", "__getattr__")


class AllowList:
    """Which modules a worker may import handlers from.

    ``prefixes``: a module is allowed when it equals a prefix or lies below it
    (``shop`` allows ``shop.handlers``). ``exact``: modules allowed only by their exact
    name (``cyclone-flow run`` allows exactly the modules its flow names); a handler
    named in such a module may be defined anywhere in that module's top-level package (a
    re-export from ``shop._impl`` in ``shop.handlers``). ``allow_all`` allows everything
    (the Python API default, where the caller wrote the code).
    """

    def __init__(
        self,
        prefixes: Iterable[str] = (),
        exact: Iterable[str] = (),
        *,
        allow_all: bool = False,
    ) -> None:
        self.prefixes = tuple(p.strip().rstrip(".") for p in prefixes if p.strip())
        self.exact = frozenset(exact)
        self.allow_all = allow_all
        self._exact_packages = frozenset(m.partition(".")[0] for m in self.exact if m)

    def allows(self, module: str) -> bool:
        """Whether handlers may be imported from ``module`` (a dotted module name)."""
        if self.allow_all or module in self.exact:
            return True
        return any(module == p or module.startswith(p + ".") for p in self.prefixes)

    def may_define(self, module: str) -> bool:
        """Whether an object defined in ``module`` may be (part of) a handler: ``module``
        is allowed, or lies in the top-level package of a module allowed by exact name."""
        if self.allows(module):
            return True
        return module.partition(".")[0] in self._exact_packages

    def describe(self) -> str:
        """The allowed modules for an error message (``"a, b"``)."""
        if self.allow_all:
            return "every module"
        names = sorted({*self.prefixes, *self.exact})
        return ", ".join(names) if names else "no module (start the worker with --allow-module)"


def split_call(call: str) -> tuple[str, list[str]]:
    """Split ``package.module:attr.path`` into the module name and the attribute parts.

    Raises :class:`HandlerImportError` (reason ``"form"``) when ``call`` is not of that
    form, and (reason ``"private"``) when an attribute part starts with ``_``; nothing is
    imported.
    """
    module_name, sep, attr = call.partition(":")
    parts = attr.split(".")
    if not sep or not module_name or not all(parts):
        raise HandlerImportError(
            f"call {call!r} is not of the form package.module:function", "form"
        )
    private = next((p for p in parts if p.startswith("_")), None)
    if private is not None:
        raise HandlerImportError(
            f"call {call!r} names the attribute {private!r}: a handler's path after ':' "
            "may not have a part starting with '_'; nothing was imported",
            "private",
        )
    return module_name, parts


_MISSING: Any = object()
_TYPE_MRO = type.__dict__["__mro__"]  # C descriptors: no metaclass can intercept them
_TYPE_DICT = type.__dict__["__dict__"]
_TYPE_MODULE = type.__dict__["__module__"]
_TYPE_NAME = type.__dict__["__qualname__"]
_C_DICTS = (types.GetSetDescriptorType, types.MemberDescriptorType)


def _mro(cls: type) -> tuple[type, ...]:
    mro: tuple[type, ...] = _TYPE_MRO.__get__(cls)
    return mro


def _class_dict(cls: type) -> Any:
    return _TYPE_DICT.__get__(cls)


def _class_module(cls: type) -> str | None:
    module = _TYPE_MODULE.__get__(cls)
    return module if type(module) is str else None


def _class_name(cls: type) -> str:
    name = _TYPE_NAME.__get__(cls)
    return name if type(name) is str else "?"


def _is(obj: Any, cls: type | tuple[type, ...]) -> bool:
    """``isinstance`` without asking ``obj`` (which would read its ``__class__``)."""
    return issubclass(type(obj), cls)


def _in_mro(cls: type, name: str) -> Any:
    """The raw attribute ``name`` of the first class of ``cls``'s MRO holding it."""
    for klass in _mro(cls):
        value = _class_dict(klass).get(name, _MISSING)
        if value is not _MISSING:
            return value
    return _MISSING


def _instance_dict(obj: Any) -> dict[str, Any] | None:
    """``obj.__dict__`` when its class keeps the standard one (a C slot), else None."""
    entry = _in_mro(type(obj), "__dict__")
    if type(entry) not in _C_DICTS or entry.__name__ != "__dict__":
        return None  # no instance dict, or a class that makes up its own
    found = entry.__get__(obj, type(obj))
    return found if type(found) is dict else None


def _module_name(module: types.ModuleType) -> str | None:
    name = (_instance_dict(module) or {}).get("__name__")
    return name if type(name) is str else None


def _is_data_descriptor(value: Any) -> bool:
    kind = type(value)
    return _in_mro(kind, "__set__") is not _MISSING or _in_mro(kind, "__delete__") is not _MISSING


def _static_lookup(obj: Any, name: str) -> tuple[Any, str]:
    """Look ``name`` up on ``obj`` as Python would, without running any code of it:
    ``(raw attribute, where)``, ``where`` being ``"own"`` (an instance's or a module's own
    namespace: used as is), ``"class"`` (``obj`` is a class and a class of its MRO holds
    it: bound as ``Class.attr`` binds) or ``"type"`` (``type(obj)``'s MRO holds it: bound
    to ``obj``). Raises AttributeError when none holds it."""
    on_type = _in_mro(type(obj), name)
    if on_type is not _MISSING and _is_data_descriptor(on_type):
        return on_type, "type"
    if _is(obj, type):
        on_class = _in_mro(obj, name)
        if on_class is not _MISSING:
            return on_class, "class"
    else:
        own = _instance_dict(obj)
        if own is not None and name in own:
            return own[name], "own"
    if on_type is not _MISSING:
        return on_type, "type"
    raise AttributeError(name)


def _defining_class(obj: Any, name: str) -> type:
    """The class on ``obj``'s lookup path (its type's MRO) whose ``__dict__`` holds
    ``name``; ``type(obj)`` when none does."""
    for cls in _mro(type(obj)):
        if name in _class_dict(cls):
            return cls
    return type(obj)


def _function_home(fn: types.FunctionType) -> str | None:
    """The module a plain function runs in: the ``__name__`` of its globals (a wrapper
    made by ``functools.wraps`` keeps the ``__module__`` of what it wraps, not this). A
    function compiled with globals of its own (``attrs`` methods) has no ``__name__``
    there: its ``__module__`` then."""
    home = fn.__globals__.get("__name__", _MISSING)
    if home is _MISSING:
        home = fn.__module__
    return home if type(home) is str else None


def _hook_origins(
    cls: type, names: tuple[str, ...], how: str, depth: int
) -> Iterator[tuple[str | None, str]]:
    """The origins of each special method ``names`` that ``cls``'s MRO defines, except
    those of ``object``, ``type`` and the builtins (C code)."""
    for name in names:
        for klass in _mro(cls):
            raw = _class_dict(klass).get(name, _MISSING)
            if raw is _MISSING:
                continue
            if klass is not object and _class_module(klass) != "builtins":
                for module, _ in _origins(raw, depth + 1):
                    yield module, how.format(name)
            break


def _class_origins(cls: type, how: str, base_how: str) -> Iterator[tuple[str | None, str]]:
    """``cls`` itself (``how``), then every class of its MRO but ``object`` and the
    builtins (``base_how``, formatted with the class name)."""
    for i, klass in enumerate(_mro(cls)):
        module = _class_module(klass)
        if i == 0:
            yield module, how
        elif klass is not object and module != "builtins":
            yield module, base_how.format(repr(_class_name(klass)))


def _origins(obj: Any, depth: int = 0) -> Iterator[tuple[str | None, str]]:
    """Yield ``(module, how)`` for every module whose code calling ``obj`` (or looking up
    its attributes) runs, as far as it can be told: ``how`` completes "'x' ... module M"
    in an error message. Reads ``obj`` only through C-level attributes."""
    kind = type(obj)
    if depth > _MAX_UNWRAP:
        yield None, "nests wrappers too deeply"
    elif _is(obj, types.ModuleType):
        yield _module_name(obj), "is"
    elif kind is functools.partial:  # a subclass is a class of its own: checked below
        for module, _ in _origins(obj.func, depth + 1):
            yield module, "is a functools.partial of code defined in"
    elif kind is staticmethod or kind is classmethod:
        yield from _origins(obj.__func__, depth + 1)
    elif kind is property:  # its __get__ (C) runs only fget
        if obj.fget is None:
            yield None, "is a property without a getter"
        else:
            for module, _ in _origins(obj.fget, depth + 1):
                yield module, "is a property whose getter is defined in"
    elif kind is types.MethodType:
        for module, _ in _origins(obj.__func__, depth + 1):
            yield module, "is a method defined in"
        for module, _ in _origins(obj.__self__, depth + 1):
            yield module, "is a method bound to an object of"
    elif kind is types.FunctionType:
        yield _function_home(obj), "is defined in"
    elif _is(obj, type):
        yield from _class_origins(obj, "is defined in", "is a class whose base {} is defined in")
        yield from _hook_origins(obj, _CLASS_HOOKS, "is a class whose {} is defined in", depth)
        if kind is not type:  # the metaclass's __call__ makes the instances
            for i, (module, how) in enumerate(
                _class_origins(kind, "", "is a class whose metaclass's base {} is defined in")
            ):
                if i == 0:
                    how = f"is a class whose metaclass {_class_name(kind)!r} is defined in"
                yield module, how
            yield from _hook_origins(
                kind, _META_HOOKS, "is a class whose metaclass's {} is defined in", depth
            )
    elif _is(obj, _BOUND_BUILTINS):
        owner = obj.__self__
        if owner is None or _is(owner, types.ModuleType):
            module = _module_name(owner) if owner is not None else obj.__module__
            yield module if type(module) is str else None, "is a builtin defined in"
        else:  # a C method of an object: the C type that defines it, and the object
            cls = _defining_class(owner, obj.__name__)
            yield _class_module(cls), "is a builtin method defined in"
            for module, _ in _origins(owner, depth + 1):
                yield module, "is a builtin method bound to an object of"
    elif _is(obj, _UNBOUND_BUILTINS):
        cls = obj.__objclass__
        yield _class_module(cls) if _is(cls, type) else None, "is a descriptor defined in"
    else:  # an instance: its class's code runs (``__call__``, attribute access)
        yield from _class_origins(
            kind,
            "is an instance of a class defined in",
            "is an instance of a class whose base {} is defined in",
        )
        yield from _hook_origins(
            kind, _INSTANCE_HOOKS, "is an instance of a class whose {} is defined in", depth
        )


def check_handler_shape(call: str, target: Callable[..., Any]) -> None:
    """Refuse a handler that cannot run as ``handler(ctx, input)`` returning its output
    (``def``, or ``async def``: a worker runs its coroutine on its event loop): an async
    generator function (or an object whose ``__call__`` is one), or a signature that does
    not bind two positional arguments (reason ``"signature"`` for both). A callable
    without a signature (some builtins) passes. Raises :class:`HandlerImportError`."""
    call_method = (
        None
        if inspect.isroutine(target)
        else inspect.getattr_static(type(target), "__call__", None)
    )
    if any(inspect.isasyncgenfunction(f) for f in (target, call_method) if f is not None):
        raise HandlerImportError(
            f"{call!r} is an async generator function: a handler returns its output "
            "(def or async def), it does not yield",
            "signature",
        )
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return  # builtins without a signature: cannot tell
    try:
        signature.bind(None, None)
    except TypeError as exc:
        raise HandlerImportError(
            f"{call!r} cannot be called as handler(ctx, input): {exc}; a handler takes two "
            f"positional parameters, e.g. def {call.rpartition(':')[2].rpartition('.')[2]}"
            "(ctx, input)",
            "signature",
        ) from None


def import_path_hint(module_name: str, exc: BaseException) -> str:
    """What to add to the message of ``exc``, the failed import of handler module
    ``module_name``: when its top-level package is on no folder of ``sys.path``
    (``import shop.handlers`` found no ``shop``), how to put that folder there
    (``--import-path DIR`` of the cyclone-flow commands, or ``PYTHONPATH``); "" for any
    other failure (a module its code imports is missing, the code raised)."""
    top = module_name.partition(".")[0]
    if not isinstance(exc, ModuleNotFoundError) or exc.name != top:
        return ""
    return (
        f"; no folder on the import path (sys.path) holds {top!r}: pass --import-path DIR, "
        f"the folder that contains {top}, or set PYTHONPATH=DIR"
    )


_SEARCH_DEPTH = 3  # folders below the current one looked into for a handler package
_SEARCH_FOLDERS = 2_000  # at most this many folders read (a home folder stays cheap)
_NOT_SEARCHED = frozenset({"__pycache__", "node_modules", "site-packages", "venv", "env"})


@functools.lru_cache(maxsize=256)
def worker_import_path(package: str, cwd: str) -> str | None:
    """The ``--import-path`` a ``cyclone-flow worker`` started in folder ``cwd`` needs to
    import the top-level package (or module) ``package``, relative to ``cwd`` (``"."``
    never: None). None when none is needed (``cwd`` holds it: the worker puts its current
    folder on ``sys.path``; or it is installed: this process finds it on ``sys.path``)
    or when it is found nowhere. Else the first folder below ``cwd`` that holds it,
    breadth first, at most ``_SEARCH_DEPTH`` levels down and ``_SEARCH_FOLDERS`` folders
    read, hidden folders, virtual environments and ``__pycache__`` skipped (the example
    flows' handlers: ``examples`` from the project's root). Imports nothing; cached."""
    root = os.path.abspath(cwd)
    if _holds(root, package):
        return None
    try:
        if importlib.util.find_spec(package) is not None:
            return None
    except (ImportError, ValueError):
        pass
    queue: deque[tuple[str, int]] = deque([(root, 0)])
    read = 0
    while queue and read < _SEARCH_FOLDERS:
        folder, depth = queue.popleft()
        read += 1
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if name.startswith(".") or name in _NOT_SEARCHED or not _is_dir(entry):
                continue
            if os.path.exists(os.path.join(entry.path, "pyvenv.cfg")):
                continue  # a virtual environment
            if _holds(entry.path, package):
                return os.path.relpath(entry.path, root)
            if depth + 1 < _SEARCH_DEPTH:
                queue.append((entry.path, depth + 1))
    return None


def own_command() -> str:
    """How to run this very ``cyclone-flow`` from a shell: ``cyclone-flow`` when that name
    on PATH is this script (or none is found), else the script's path, quoted for a shell
    (a virtual environment that is not activated). For the commands ``init`` and the
    waiting steps' worker hint (``status``, the dashboard) print."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    candidates = [script] if script is not None and script.name == "cyclone-flow" else []
    candidates.append(Path(sys.executable).parent / "cyclone-flow")
    found = shutil.which("cyclone-flow")
    for candidate in candidates:
        if not candidate.is_file():
            continue
        mine = candidate.resolve()
        if found is not None and Path(found).resolve() == mine:
            return "cyclone-flow"
        return shlex.quote(str(candidate.absolute()))
    return "cyclone-flow"


def _holds(folder: str, package: str) -> bool:
    """Whether ``folder`` holds package ``package`` (with an ``__init__.py``) or module
    file ``package.py``."""
    return os.path.isfile(os.path.join(folder, package, "__init__.py")) or os.path.isfile(
        os.path.join(folder, f"{package}.py")
    )


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _mtime(module: types.ModuleType) -> float | None:
    """The modification time of ``module``'s source file, or None (no file)."""
    path = getattr(module, "__file__", None)
    try:
        return os.stat(path).st_mtime if isinstance(path, str) else None
    except OSError:
        return None


class HandlerResolver:
    """Caches resolved handlers per ``call`` string; thread-safe."""

    def __init__(self, allow: AllowList) -> None:
        self.allow = allow
        self._cache: dict[str, Handler] = {}
        self._lock = threading.Lock()
        # module name -> the mtime of its file when this resolver first used it
        self._mtimes: dict[str, float | None] = {}

    def resolve(self, call: str) -> Handler:
        """Return the callable named by ``call``.

        Raises :class:`HandlerImportError` when ``call`` is malformed, has a part starting
        with ``_`` after ``:``, names a module that is not allowed (never imported), does
        not import, lacks the attribute, is not callable, or when any object on its
        attribute path is a module or is not defined in an allowed module.
        """
        with self._lock:
            cached = self._cache.get(call)
        if cached is not None:
            return cached
        module_name, parts = split_call(call)
        if not self.allow.allows(module_name):
            raise HandlerImportError(
                f"module {module_name!r} is not allowed on this worker (allowed: "
                f"{self.allow.describe()}); it was not imported",
                "module",
            )
        try:
            module = importlib.import_module(module_name)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # any failure of the import, SystemExit too
            raise HandlerImportError(
                f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
                + import_path_hint(module_name, exc)
            ) from exc
        with self._lock:
            seen = self._mtimes.setdefault(module_name, _mtime(module))
        target: Any = module
        for i, part in enumerate(parts):
            # ``target`` was checked (or is the allowed module): the raw attribute is
            # checked before anything of it runs, then bound (see the module docstring)
            try:
                target = self._attribute(call, module_name, parts, target, part)
            except HandlerImportError as exc:
                if exc.reason != "attribute":
                    raise
                now = _mtime(module)
                hint = (
                    f"; the file of module {module_name!r} changed after this worker "
                    "imported it: a worker loads handler code once, so restart it or run "
                    "`cyclone-flow worker --reload`"
                    if seen is not None and now is not None and now != seen
                    else ""
                )
                if i == 0:  # a misspelt name of the module's own: the close ones
                    names = [n for n in dict(vars(module)) if not n.startswith("_")]
                    hint = did_you_mean(part, names) + hint
                if not hint:
                    raise
                raise HandlerImportError(str(exc) + hint, "attribute") from None
            if i == len(parts) - 1 and not callable(target):
                raise HandlerImportError(
                    f"{call!r} is not callable (it is {_a(_class_name(type(target)))})",
                    "not_callable",
                )
            self._check(call, part, target)
        check_handler_shape(call, target)
        resolved: Handler = target
        with self._lock:
            self._cache[call] = resolved
        return resolved

    def _attribute(
        self, call: str, module_name: str, parts: list[str], target: Any, part: str
    ) -> Any:
        """``getattr(target, part)`` where no code but that of allowed modules can run."""
        raw, where = _MISSING, ""
        try:
            if self.allow.allow_all:  # nothing is refused: Python's own lookup
                return getattr(target, part)
            raw, where = _static_lookup(target, part)
        except AttributeError:
            pass
        if raw is _MISSING:
            # a __getattr__: the module's own function, or one of target's class (whose
            # whole MRO was checked with target)
            hook = (
                (_instance_dict(target) or {}).get("__getattr__", _MISSING)
                if _is(target, types.ModuleType)
                else _in_mro(type(target), "__getattr__")
            )
            if hook is not _MISSING:
                self._check(call, part, hook)
                try:
                    return getattr(target, part)
                except AttributeError:
                    pass
            raise HandlerImportError(
                f"module {module_name!r} has no attribute {'.'.join(parts)!r}", "attribute"
            )
        if where == "own":
            return raw  # a module's or an instance's own attribute: nothing to bind
        instance = target if where == "type" else None
        owner = type(target) if where == "type" else target
        kind = type(raw)
        custom = kind not in _BINDS_ALONE and _in_mro(kind, "__get__") is not _MISSING
        if custom or kind is property or kind in _UNBOUND_BUILTINS:
            self._check(call, part, raw)  # binding it runs its code: checked first
        if kind is types.FunctionType:
            return raw if instance is None else types.MethodType(raw, instance)
        if kind is staticmethod:
            return raw.__func__
        if kind is classmethod:
            return types.MethodType(raw.__func__, owner)
        if kind is property or kind in _UNBOUND_BUILTINS:  # C __get__
            return raw.__get__(instance, owner)
        if custom:  # a descriptor of an allowed class
            return getattr(target, part)
        return raw  # not a descriptor: as is (the loop checks it)

    def _check(self, call: str, part: str, obj: Any) -> None:
        if _is(obj, types.ModuleType):
            # ``pkg.mod:os.system`` would reach a module the worker does not allow
            raise HandlerImportError(
                f"{call!r} goes through the module {_module_name(obj)!r}; name the handler by "
                "its own module",
                "foreign",
            )
        if self.allow.allow_all:
            return
        for module, how in _origins(obj):
            if not isinstance(module, str):  # None: a builtin without a module, ...
                raise HandlerImportError(
                    f"{call!r}: the module that defines {part!r} cannot be determined, "
                    "which is not allowed on this worker (allowed: "
                    f"{self.allow.describe()})",
                    "foreign",
                )
            if not self.allow.may_define(module):
                # e.g. ``from os import system`` in an allowed module
                raise HandlerImportError(
                    f"{call!r}: {part!r} {how} module {module!r}, which is not allowed on "
                    f"this worker (allowed: {self.allow.describe()}); a handler must be "
                    "defined in an allowed module",
                    "foreign",
                )


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"

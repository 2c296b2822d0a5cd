"""Resolve a node's ``call`` (``package.module:function``) to a Python callable, but only
under the module prefixes the worker was started with (worker security: a dotted path
outside them is a clear error on the step and is never imported).

Every object the attribute path reaches must be defined in an allowed module: not only
the module named before the ``:``, but each object after it (a function imported into an
allowed module from elsewhere, a foreign class, a bound method of a foreign object, a
``functools.partial`` of a foreign function, a builtin, ...). No part of the path may
start with ``_``, so ``fn.__call__``, ``fn.__globals__`` or ``__loader__`` are refused
before anything is imported.
"""

from __future__ import annotations

import functools
import importlib
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from cyclone_flow.errors import HandlerImportError as HandlerImportError

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


def _defining_class(obj: Any, name: str) -> Any:
    """The class on ``obj``'s lookup path (its MRO, or its metaclass's for a class) whose
    ``__dict__`` holds ``name``; ``type(obj)`` when none does."""
    for cls in type(obj).__mro__:
        if name in vars(cls):
            return cls
    return type(obj)


def _origins(obj: Any, depth: int = 0) -> Iterator[tuple[str | None, str]]:
    """Yield ``(module, how)`` for every module whose code calling ``obj`` runs, as far as
    it can be told: ``how`` completes "'x' ... module M" in an error message."""
    if depth > _MAX_UNWRAP:
        yield None, "nests wrappers too deeply"
    elif isinstance(obj, types.ModuleType):
        yield obj.__name__, "is"
    elif type(obj) is functools.partial:  # a subclass may override __call__
        for module, _ in _origins(obj.func, depth + 1):
            yield module, "is a functools.partial of code defined in"
    elif type(obj) in (staticmethod, classmethod):
        yield from _origins(obj.__func__, depth + 1)
    elif isinstance(obj, types.MethodType):
        for module, _ in _origins(obj.__func__, depth + 1):
            yield module, "is a method defined in"
        for module, _ in _origins(obj.__self__, depth + 1):
            yield module, "is a method bound to an object of"
    elif isinstance(obj, types.FunctionType | type):
        yield getattr(obj, "__module__", None), "is defined in"
    elif isinstance(obj, _BOUND_BUILTINS):
        owner = getattr(obj, "__self__", None)
        if owner is None or isinstance(owner, types.ModuleType):
            module = owner.__name__ if owner is not None else getattr(obj, "__module__", None)
            yield module, "is a builtin defined in"
        else:  # a C method of an object: the C type that defines it, and the object
            cls = _defining_class(owner, getattr(obj, "__name__", ""))
            yield getattr(cls, "__module__", None), "is a builtin method defined in"
            for module, _ in _origins(owner, depth + 1):
                yield module, "is a builtin method bound to an object of"
    elif isinstance(obj, _UNBOUND_BUILTINS):
        cls = getattr(obj, "__objclass__", None)
        yield getattr(cls, "__module__", None), "is a descriptor defined in"
    else:  # an instance: its class's code runs (``__call__``, attribute access)
        yield getattr(type(obj), "__module__", None), "is an instance of a class defined in"


class HandlerResolver:
    """Caches resolved handlers per ``call`` string; thread-safe."""

    def __init__(self, allow: AllowList) -> None:
        self.allow = allow
        self._cache: dict[str, Handler] = {}
        self._lock = threading.Lock()

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
        except Exception as exc:  # any failure of the import is the step's error
            raise HandlerImportError(
                f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
            ) from exc
        target: Any = module
        for i, part in enumerate(parts):
            # ``target`` was checked (or is the allowed module): getattr runs only code
            # of allowed modules (a property, a module __getattr__)
            try:
                target = getattr(target, part)
            except AttributeError:
                raise HandlerImportError(
                    f"module {module_name!r} has no attribute {'.'.join(parts)!r}",
                    "attribute",
                ) from None
            if i == len(parts) - 1 and not callable(target):
                raise HandlerImportError(f"{call!r} is not callable", "not_callable")
            self._check(call, part, target)
        resolved: Handler = target
        with self._lock:
            self._cache[call] = resolved
        return resolved

    def _check(self, call: str, part: str, obj: Any) -> None:
        if isinstance(obj, types.ModuleType):
            # ``pkg.mod:os.system`` would reach a module the worker does not allow
            raise HandlerImportError(
                f"{call!r} goes through the module {obj.__name__!r}; name the handler by "
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

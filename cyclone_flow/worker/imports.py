"""Resolve a node's ``call`` (``package.module:function``) to a Python callable, but only
under the module prefixes the worker was started with (worker security: a dotted path
outside them is a clear error on the step and is never imported)."""

from __future__ import annotations

import importlib
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

from cyclone_flow.errors import CycloneError

Handler = Callable[..., Any]


class HandlerImportError(CycloneError):
    """A ``call`` that is not allowed, does not import, or is not callable."""


class AllowList:
    """Which modules a worker may import handlers from.

    ``prefixes``: a module is allowed when it equals a prefix or lies below it
    (``shop`` allows ``shop.handlers``). ``exact``: modules allowed only by their exact
    name (``cyclone-flow run`` allows exactly the modules its flow names). ``allow_all``
    allows everything (the Python API default, where the caller wrote the code).
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

    def allows(self, module: str) -> bool:
        if self.allow_all or module in self.exact:
            return True
        return any(module == p or module.startswith(p + ".") for p in self.prefixes)

    def describe(self) -> str:
        if self.allow_all:
            return "every module"
        names = sorted({*self.prefixes, *self.exact})
        return ", ".join(names) if names else "no module (start the worker with --allow-module)"


class HandlerResolver:
    """Caches resolved handlers per ``call`` string; thread-safe."""

    def __init__(self, allow: AllowList) -> None:
        self.allow = allow
        self._cache: dict[str, Handler] = {}
        self._lock = threading.Lock()

    def resolve(self, call: str) -> Handler:
        """Return the callable named by ``call``; raise :class:`HandlerImportError`."""
        with self._lock:
            cached = self._cache.get(call)
        if cached is not None:
            return cached
        module_name, sep, attr = call.partition(":")
        if not sep or not module_name or not attr:
            raise HandlerImportError(f"call {call!r} is not of the form package.module:function")
        if not self.allow.allows(module_name):
            raise HandlerImportError(
                f"module {module_name!r} is not allowed on this worker (allowed: "
                f"{self.allow.describe()}); it was not imported"
            )
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # any failure of the import is the step's error
            raise HandlerImportError(
                f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
            ) from exc
        target: Any = module
        for part in attr.split("."):
            try:
                target = getattr(target, part)
            except AttributeError:
                raise HandlerImportError(
                    f"module {module_name!r} has no attribute {attr!r}"
                ) from None
            if isinstance(target, types.ModuleType):
                # ``pkg.mod:os.system`` would reach a module the worker does not allow
                raise HandlerImportError(
                    f"{call!r} goes through the module {target.__name__!r}; name the "
                    "handler by its own module"
                )
        if not callable(target):
            raise HandlerImportError(f"{call!r} is not callable")
        defined_in = getattr(target, "__module__", None)
        if (
            isinstance(target, types.FunctionType | types.BuiltinFunctionType)
            and isinstance(defined_in, str)
            and not self.allow.allows(defined_in)
            and defined_in.partition(".")[0] != module_name.partition(".")[0]
        ):
            # A function imported into an allowed module from another package (from os
            # import system); re-exports inside the handler's own package are fine.
            raise HandlerImportError(
                f"{call!r} is defined in module {defined_in!r}, which is not allowed on this "
                f"worker (allowed: {self.allow.describe()})"
            )
        resolved: Handler = target
        with self._lock:
            self._cache[call] = resolved
        return resolved

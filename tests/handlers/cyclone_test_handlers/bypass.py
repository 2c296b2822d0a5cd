"""Packages for the allow-list bypass tests: an allowed package whose module imports
objects from a foreign module, and that foreign module, which writes a marker file
whenever any of its code runs (a function called, a class instantiated, a method or a
callable instance called, a descriptor or ``__getattr__`` asked, a subclass's inherited
``__call__``/``__init__``/``__new__`` or a metaclass run). Written into a folder the test
puts on ``sys.path`` (or a worker's ``--import-path``)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BypassPackages:
    """``allowed``: the package a worker allows; ``evil``: the foreign module; ``deco``:
    a harmless foreign decorator module; ``marker``: written when evil code runs."""

    root: Path
    allowed: str
    evil: str
    deco: str
    marker: Path


def write_bypass_packages(root: Path, suffix: str = "") -> BypassPackages:
    """Write ``allowed_pkg{suffix}`` (with ``mod``, ``sub``, ``other``), ``evil_lib{suffix}``
    and ``deco_lib{suffix}`` under ``root``; the marker file is ``root/evil-code-ran``."""
    allowed, evil, deco = f"allowed_pkg{suffix}", f"evil_lib{suffix}", f"deco_lib{suffix}"
    marker = root / "evil-code-ran"
    pkg = root / allowed
    pkg.mkdir(parents=True)
    (root / f"{evil}.py").write_text(
        textwrap.dedent(
            f"""\
            import functools

            def _ran(what):
                with open({str(marker)!r}, "a", encoding="utf-8") as fh:
                    fh.write(what + "\\n")

            def do(ctx, input):
                _ran("do")
                return {{"evil": True}}

            class Evil:
                def __init__(self, ctx=None, input=None):
                    _ran("Evil()")

            class Caller:
                def __call__(self, ctx, input):
                    _ran("caller()")
                    return {{"evil": True}}

            class Client:
                def send(self, ctx, input):
                    _ran("client.send")
                    return {{"evil": True}}

            class Sneaky(functools.partial):
                def __call__(self, *args):
                    _ran("sneaky partial")
                    return super().__call__(*args)

            class CallBase:  # each of these runs evil code when a subclass is used
                def __call__(self, ctx, input):
                    _ran("inherited __call__")
                    return {{"evil": True}}

            class InitBase:
                def __init__(self, ctx=None, input=None):
                    _ran("inherited __init__")

            class NewBase:
                def __new__(cls, *args):
                    _ran("inherited __new__")
                    return super().__new__(cls)

            class Meta(type):
                def __call__(cls, *args):
                    _ran("metaclass __call__")
                    return super().__call__()

            class GetattrBase:
                def __getattr__(self, name):
                    _ran("__getattr__")
                    return do

            class Descriptor:
                def __get__(self, obj, owner=None):
                    _ran("descriptor __get__")
                    return do

            class Liar:  # isinstance() would ask for its __class__
                @property
                def __class__(self):
                    _ran("__class__")
                    return type(self)

                def __call__(self, ctx, input):
                    _ran("liar()")

            def getter(self):
                _ran("property getter")
                return do

            def wrapping(fn):  # a decorator of this module: its wrapper is evil code
                @functools.wraps(fn)
                def wrapper(ctx, input):
                    _ran("wrapper")
                    return fn(ctx, input)
                return wrapper

            caller = Caller()
            client = Client()
            """
        )
    )
    (root / f"{deco}.py").write_text(
        textwrap.dedent(
            """\
            import functools

            def traced(fn):
                @functools.wraps(fn)
                def wrapper(ctx, input):
                    return {"traced": fn(ctx, input)}
                return wrapper
            """
        )
    )
    (pkg / "__init__.py").write_text(f"from {allowed}.sub import sub_handler  # re-export\n")
    (pkg / "other.py").write_text("def other_handler(ctx, input):\n    return {'other': input}\n")
    (pkg / "sub.py").write_text(
        "import functools\n"
        f"from {allowed}.other import other_handler  # re-export from a sibling\n\n"
        "def sub_handler(ctx, input):\n    return {'sub': input}\n\n"
        "def traced_here(fn):  # an allowed decorator\n"
        "    @functools.wraps(fn)\n"
        "    def wrapper(ctx, input):\n"
        "        return {'traced': fn(ctx, input)}\n"
        "    return wrapper\n"
    )
    (pkg / "mod.py").write_text(
        textwrap.dedent(
            f"""\
            import functools
            from os import system
            from subprocess import Popen, run

            from {evil} import (
                CallBase, Descriptor, Evil, GetattrBase, InitBase, Liar, Meta, NewBase, Sneaky,
                caller, client, do, getter, wrapping,
            )
            from {deco} import traced
            from {allowed}.sub import sub_handler, traced_here

            CONFIG = {{"mode": "safe"}}
            send = client.send
            evil_partial = functools.partial(do)

            def ok(ctx, input):
                return {{"ok": input}}

            def fn(ctx, input):
                return input

            class Handler:
                def __init__(self, ctx=None, input=None):
                    self.input = input

                def __call__(self, ctx, input):
                    return {{"called": input}}

                def method(self, ctx, input):
                    return {{"method": input}}

                @staticmethod
                def static(ctx, input):
                    return {{"static": input}}

                @classmethod
                def klass(cls, ctx, input):
                    return {{"klass": input}}

            handler_obj = Handler()
            ok_partial = functools.partial(functools.partial(ok))
            decorated = traced(ok)  # a harmless foreign decorator: its wrapper is foreign
            decorated_here = traced_here(ok)  # a decorator of the allowed package
            evil_decorated = wrapping(ok)  # functools.wraps gives it this module's name
            cached = functools.lru_cache(ok)
            sneaky = Sneaky(ok)  # a partial of an allowed function, but not a functools.partial

            # classes of this module that take their code from evil_lib
            class SubCall(CallBase):
                pass

            class SubInit(InitBase):
                pass

            class SubNew(NewBase):
                pass

            class WithMeta(metaclass=Meta):
                pass

            class Partial(functools.partial):
                pass

            class GetattrSub(GetattrBase):
                pass

            class Holder:
                d = Descriptor()
                p = property(getter)
                call_attr = do

            class Assigned:  # its special method is evil_lib's function
                __call__ = do

            class Lazy:
                def __getattr__(self, name):
                    return ok

            class Props:
                @property
                def handler(self):
                    return ok

            class DictHandler(dict):  # builtin bases run C code only
                def __init__(self, ctx=None, input=None):
                    super().__init__(got=input)

            inst_call = SubCall()
            partial_sub = Partial(do)
            partial_sub_ok = Partial(ok)
            ga = GetattrSub()
            holder = Holder()
            assigned = Assigned()
            liar = Liar()
            lazy = Lazy()
            props = Props()

            def __getattr__(name):  # this module's own: allowed code
                if name == "dynamic":
                    return ok
                raise AttributeError(name)
            """
        )
    )
    return BypassPackages(root, allowed, evil, deco, marker)

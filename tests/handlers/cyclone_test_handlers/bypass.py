"""Packages for the allow-list bypass tests: an allowed package whose module imports
objects from a foreign module, and that foreign module, which writes a marker file
whenever any of its code runs (a function called, a class instantiated, a method or a
callable instance called). Written into a folder the test puts on ``sys.path`` (or a
worker's ``--import-path``)."""

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
        f"from {allowed}.other import other_handler  # re-export from a sibling\n\n"
        "def sub_handler(ctx, input):\n    return {'sub': input}\n"
    )
    (pkg / "mod.py").write_text(
        textwrap.dedent(
            f"""\
            import functools
            from os import system
            from subprocess import Popen, run

            from {evil} import Evil, Sneaky, caller, client, do
            from {deco} import traced
            from {allowed}.sub import sub_handler

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
            decorated = traced(ok)
            sneaky = Sneaky(ok)  # a partial of an allowed function, but not a functools.partial
            """
        )
    )
    return BypassPackages(root, allowed, evil, deco, marker)

"""Lint flow files and folders, optionally importing the callables they name.

A missing path, or a folder with no flow file in it, raises :class:`LintPathError` (exit
code 2, a usage mistake) before any file is linted; every problem in an existing file is
returned as a :class:`Problem`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Any

from cyclone_flow.errors import LintPathError, NoFlowFilesError, Problem
from cyclone_flow.flowfile.load import analyse_text
from cyclone_flow.flowfile.read import Document, read_text
from cyclone_flow.handlers import (
    AllowList,
    HandlerImportError,
    HandlerResolver,
    import_path_hint,
    split_call,
)

__all__ = [
    "LintPathError",
    "NoFlowFilesError",
    "check_imports_of",
    "find_flow_files",
    "lint_paths",
]

FLOW_SUFFIXES = (".yaml", ".yml")


def find_flow_files(paths: Sequence[str]) -> list[str]:
    """Expand ``paths``: files as given, folders to their ``*.yaml``/``*.yml`` files
    (recursively, sorted; hidden folders skipped); a file reached twice is listed once,
    where it is first reached.

    Raises
    ------
    LintPathError
        For the first path that does not exist; :class:`NoFlowFilesError` (a subclass)
        for the first folder without any flow file.
    """
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found = []
            for root, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found += [os.path.join(root, n) for n in names if n.endswith(FLOW_SUFFIXES)]
            if not found:
                raise NoFlowFilesError(path)
            files += sorted(found)
        elif os.path.exists(path):
            files.append(path)
        else:
            raise LintPathError(path)
    # a file named twice (given twice, or also inside a folder given) counts once
    seen: set[str] = set()
    unique = []
    for file in files:
        real = os.path.realpath(file)
        if real not in seen:
            seen.add(real)
            unique.append(file)
    return unique


def lint_paths(paths: Sequence[str], check_imports: bool = False) -> list[Problem]:
    """Lint every flow file under ``paths``; return all problems, file by file.

    Parameters
    ----------
    paths
        Files, or folders searched recursively for ``*.yaml`` / ``*.yml``.
    check_imports
        Also import each node's ``call`` (codes E020-E024); uses the current ``sys.path``.

    Raises
    ------
    LintPathError
        When a path does not exist, or (:class:`NoFlowFilesError`) a folder holds no flow
        file; nothing is linted.
    """
    problems: list[Problem] = []
    for file in find_flow_files(paths):
        text, problem = read_text(file)
        if text is None:
            problems += [problem] if problem else []
            continue
        doc, found = analyse_text(text, file)
        problems += found
        if check_imports and doc is not None and not _errors(found):
            problems += check_imports_of(doc)
    return problems


def _errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


def check_imports_of(doc: Document) -> list[Problem]:
    """Import the ``call`` of every node of a valid ``doc`` and check it.

    Codes: E020 the module does not import, E021 the attribute is missing, E022 it is
    not callable, E023 its signature does not accept ``(ctx, input)``, E024 a worker
    refuses it even when its module is allowed (a part after ``:`` starts with ``_``, or
    the path reaches an object defined outside the modules the flow names and their
    packages, as ``cyclone-flow run`` checks). E023 also refuses an async generator
    function; ``async def`` handlers pass (E025, which refused them, is retired).
    """
    out: list[Problem] = []
    nodes = doc.data.get("nodes", {}) if isinstance(doc.data, dict) else {}
    calls = {
        name: node["call"]
        for name, node in nodes.items()
        if isinstance(node, dict) and isinstance(node.get("call"), str) and ":" in node["call"]
    }
    resolver = HandlerResolver(AllowList(exact={c.partition(":")[0] for c in calls.values()}))
    for name, call in calls.items():
        pos = doc.value_pos(("nodes", name, "call"))
        found = _check_call(call, resolver)
        if found is not None:
            code, message = found
            out.append(doc.problem(pos, code, f"node {name!r}: {message}"))
    return out


_IMPORT_CODES = {"attribute": "E021", "not_callable": "E022", "signature": "E023"}


def _check_call(call: str, resolver: HandlerResolver) -> tuple[str, str] | None:
    module_name = call.partition(":")[0]
    try:
        split_call(call)  # a private part: refused before anything is imported
    except HandlerImportError as exc:
        return "E024", f"a worker refuses it: {exc}"
    try:
        importlib.import_module(module_name)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        hint = import_path_hint(module_name, exc)
        return "E020", f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}{hint}"
    try:
        # the worker's own walk: no code of an object outside the allowed modules runs
        # (a descriptor's __get__, a __getattr__) before it is refused
        target: Any = resolver.resolve(call)
    except HandlerImportError as exc:
        code = _IMPORT_CODES.get(exc.reason)
        if code is not None:
            return code, str(exc)
        return "E024", f"a worker refuses it: {exc}"
    del target  # its shape (E023) was checked by resolve, as on a worker
    return None

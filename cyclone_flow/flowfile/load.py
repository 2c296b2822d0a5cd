"""The flow pipeline: read -> parse YAML -> validate (schema) -> check (graph) -> build.

:func:`load_flow` and :func:`load_flow_text` raise :class:`FlowError` listing every
problem found, and no other exception for a bad file. :func:`lint_text` returns the
problems instead.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager

from cyclone_flow.errors import FlowError, Problem
from cyclone_flow.flowfile.build import build_flow
from cyclone_flow.flowfile.check import check_document, check_schedule_inputs
from cyclone_flow.flowfile.children import check_children, child_path, child_refs
from cyclone_flow.flowfile.model import Flow
from cyclone_flow.flowfile.read import Document, parse_yaml, read_text
from cyclone_flow.flowfile.schema import check_input_schema, validate_document

__all__ = ["analyse_text", "lint_text", "load_flow", "load_flow_text"]


def _sort(problems: list[Problem]) -> list[Problem]:
    return sorted(set(problems), key=lambda p: (p.line, p.col, p.code, p.message))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: a big flow allocates hundreds of thousands of
    objects, none in cycles, and every full collection would walk them all (a quarter of
    the time of linting a 1 MB flow)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def analyse_text(text: str, path: str = "<string>") -> tuple[Document | None, list[Problem]]:
    """Parse, validate and check ``text``; return the document and every problem (sorted).

    The document is ``None`` when the YAML itself could not be read into JSON data; the
    schema and graph checks then do not run.
    """
    with _gc_paused():
        doc, problems = parse_yaml(text, path)
        if doc is None:
            return None, _sort(problems)
        problems = validate_document(doc) + check_input_schema(doc) + check_document(doc)
        problems += check_children(doc, lint_text)
        if not any(p.severity == "error" for p in problems):  # a valid input_schema
            problems += check_schedule_inputs(doc)
        return doc, _sort(problems)


def lint_text(text: str, path: str = "<string>") -> list[Problem]:
    """Every problem of the flow ``text`` (``path`` names it in the problems), sorted."""
    return analyse_text(text, path)[1]


def load_flow_text(text: str, path: str = "<string>") -> Flow:
    """Load a flow from YAML ``text``.

    Parameters
    ----------
    text
        The flow file's content.
    path
        Named in problems and kept as :attr:`Flow.path`; ``flow:`` files of child nodes
        are relative to its folder (to the current folder for ``<string>``).

    Child flows are loaded too (:attr:`Flow.children`), so the whole topology is fixed
    when the flow is submitted.

    Raises
    ------
    FlowError
        With every problem found, when ``text`` is not a valid flow.
    """
    doc, found = analyse_text(text, path)
    problems = [p for p in found if p.severity == "error"]  # warnings do not stop it
    if problems or doc is None:
        raise FlowError(problems)
    # check_children found every child file readable, valid and free of recursion
    children = {name: load_flow(child_path(path, ref)) for name, ref in child_refs(doc.data)}
    try:
        return build_flow(doc.data, path, children)
    except (KeyError, TypeError, ValueError) as exc:  # a gap between schema and builder
        raise FlowError([Problem(path, 1, 1, "E003", f"invalid flow: {exc}")]) from exc


def load_flow(path: str | os.PathLike[str]) -> Flow:
    """Load the flow file at ``path`` (UTF-8 YAML).

    Raises
    ------
    FlowError
        With every problem found, including an unreadable or non-UTF-8 file (E000).
    """
    name = os.fspath(path)
    text, problem = read_text(name)
    if text is None:
        raise FlowError([problem] if problem else [])
    return load_flow_text(text, name)

"""Locate the files that ship with cyclone-flow: the flow JSON Schema and the SQL migrations.

In the repository they live at the top level (``schemas/``, ``migrations/``); in an
installed wheel they are the data packages ``cyclone_flow._schemas`` and
``cyclone_flow._migrations`` (see ``[tool.setuptools.package-dir]`` in pyproject.toml).
"""

from __future__ import annotations

import importlib.resources
from importlib.resources.abc import Traversable
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent


def _data_dir(name: str) -> Traversable:
    candidate = _REPO_ROOT / name
    if (candidate / ".cyclone-flow-data").exists():
        return candidate
    return importlib.resources.files(f"cyclone_flow._{name}")


def schemas_dir() -> Traversable:
    """The folder holding ``flow.schema.json``."""
    return _data_dir("schemas")


def migrations_dir() -> Traversable:
    """The folder holding the numbered ``NNNN_name.sql`` migrations."""
    return _data_dir("migrations")

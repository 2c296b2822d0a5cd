"""Packaging: the wheel's package list in pyproject.toml names every package of the source
tree, so a non-editable install (README's first command) imports what an editable one does
(tests/acceptance/test_install.py installs one; this is the fast check)."""

from __future__ import annotations

import tomllib

from helpers.paths import REPO


def test_every_package_of_the_source_tree_is_in_the_wheel() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "cyclone_flow").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert not on_disk - listed, (
        f"pyproject.toml [tool.setuptools] packages misses: {sorted(on_disk - listed)}"
    )

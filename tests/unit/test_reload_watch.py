"""What ``worker --reload`` watches: the ``--import-path`` folders and the
folder of each allowed package, found without importing it (a dotted prefix: its
subpackage or module), a module file alone; the current folder only when none is found."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cyclone_flow.cli.reload import watch_set


def test_the_allowed_packages_and_import_paths_not_the_current_folder(tmp_path: Path) -> None:
    cwd = tmp_path / "project"
    (cwd / "shopw" / "handlers").mkdir(parents=True)
    (cwd / "shopw" / "__init__.py").write_text("raise SystemExit('imported!')\n")
    (cwd / "shopw" / "handlers" / "__init__.py").write_text("")
    (cwd / "single_modw.py").write_text("")
    lib = tmp_path / "lib"
    (lib / "otherw").mkdir(parents=True)
    (lib / "otherw" / "__init__.py").write_text("")
    watched = watch_set(
        ["shopw.handlers", "single_modw", "otherw", "missing_pkgw"], [str(lib)], str(cwd)
    )
    assert "shopw" not in sys.modules  # located, never imported
    # otherw lies in the import path lib: watched with it
    assert watched.trees == tuple(sorted([str(lib), str(cwd / "shopw" / "handlers")]))
    assert watched.files == (str(cwd / "single_modw.py"),)
    assert watched.counts(str(cwd / "shopw" / "handlers" / "x.py"))
    assert watched.counts(str(cwd / "single_modw.py"))
    assert watched.counts(str(lib / "otherw" / "y.py"))
    assert not watched.counts(str(cwd / "scratch.py"))
    assert not watched.counts(str(cwd / "shopw" / "__init__.py"))  # above the prefix
    assert str(cwd) in watched.roots  # watched for its one module file, filtered


def test_the_current_folder_when_nothing_is_found(tmp_path: Path) -> None:
    watched = watch_set(["not_written_yetw"], [], str(tmp_path))
    assert watched.trees == (str(tmp_path.resolve()),) and watched.files == ()
    assert watched.counts(os.path.join(str(tmp_path.resolve()), "a.py"))

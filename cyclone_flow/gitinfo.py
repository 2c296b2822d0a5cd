"""Where a file stands in git: the commit checked out, its path in the repository, and
whether it differs from that commit. Read through the ``git`` binary (a subprocess with a
timeout); no git library. Used to record where a deployed flow file came from.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePath

__all__ = ["GIT_TIMEOUT_S", "GitInfo", "git_info"]

GIT_TIMEOUT_S = 5.0
"""How long one ``git`` command may take before :func:`git_info` gives up (None)."""


@dataclass(frozen=True, slots=True)
class GitInfo:
    """A file in a git work tree.

    ``commit`` is the full sha of ``HEAD``; ``path`` the file's path relative to the
    repository root, with ``/`` separators; ``dirty`` is True when the file differs from
    ``HEAD`` (staged or not), is untracked, or is ignored (so not in the commit).
    """

    commit: str
    path: str
    dirty: bool


def _git(cwd: str, *args: str) -> str | None:
    """The stdout of ``git -C cwd args`` (surrogate-escaped), or None when git is
    missing, fails, or takes longer than :data:`GIT_TIMEOUT_S`."""
    # no index lock taken by status; a path is a path, never a pathspec pattern
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_LITERAL_PATHSPECS": "1", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            ["git", "-C", cwd, *args],
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            env=env,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", "surrogateescape")


def git_info(path: str) -> GitInfo | None:
    """The :class:`GitInfo` of the file at ``path``.

    None, never an exception, when the file does not exist, ``git`` is not installed or
    fails (times out), the file is not inside a work tree, or the repository has no
    commit yet.
    """
    try:
        target = Path(os.path.realpath(path))
        if not target.exists():
            return None
        folder = target if target.is_dir() else target.parent
    except (OSError, ValueError):
        return None
    top = _git(str(folder), "rev-parse", "--show-toplevel")
    commit = _git(str(folder), "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if not top or not commit:
        return None
    root = Path(os.path.realpath(top.rstrip("\n")))
    try:
        relative = PurePath(os.path.relpath(target, root))
    except ValueError:  # another drive (Windows)
        return None
    if relative.parts[:1] == ("..",):
        return None
    rel = relative.as_posix()
    status = _git(
        str(root),
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--ignored=matching",
        "--",
        rel,
    )
    if status is None:
        return None
    return GitInfo(commit=commit.strip(), path=rel, dirty=status != "")

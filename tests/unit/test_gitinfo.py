"""gitinfo: the commit, repository path and dirtiness of a file, read from a real git
repository made in tmp_path; None (never an exception) outside one."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cyclone_flow import gitinfo
from cyclone_flow.gitinfo import GitInfo, git_info

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **_ENV},
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit holding ``flows/order.yaml`` and ``top.yaml``."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "flows").mkdir()
    (root / "flows" / "order.yaml").write_text("name: order\n", encoding="utf-8")
    (root / "top.yaml").write_text("name: top\n", encoding="utf-8")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    return root


def test_clean_file(repo: Path) -> None:
    info = git_info(str(repo / "flows" / "order.yaml"))
    assert info == GitInfo(
        commit=git(repo, "rev-parse", "HEAD"), path="flows/order.yaml", dirty=False
    )
    assert len(info.commit) == 40


def test_relative_path_from_another_folder(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo / "flows")
    info = git_info("../top.yaml")
    assert info is not None and info.path == "top.yaml" and not info.dirty


def test_edited_file_is_dirty_and_others_stay_clean(repo: Path) -> None:
    (repo / "top.yaml").write_text("name: top2\n", encoding="utf-8")
    assert git_info(str(repo / "top.yaml")) == GitInfo(
        git(repo, "rev-parse", "HEAD"), "top.yaml", True
    )
    info = git_info(str(repo / "flows" / "order.yaml"))
    assert info is not None and not info.dirty


def test_staged_change_is_dirty(repo: Path) -> None:
    (repo / "top.yaml").write_text("name: top2\n", encoding="utf-8")
    git(repo, "add", "top.yaml")
    info = git_info(str(repo / "top.yaml"))
    assert info is not None and info.dirty


def test_untracked_and_ignored_files_are_dirty(repo: Path) -> None:
    (repo / "flows" / "new.yaml").write_text("name: new\n", encoding="utf-8")
    info = git_info(str(repo / "flows" / "new.yaml"))
    assert info is not None and info.dirty and info.path == "flows/new.yaml"
    (repo / ".gitignore").write_text("*.tmp.yaml\n", encoding="utf-8")
    (repo / "x.tmp.yaml").write_text("name: x\n", encoding="utf-8")
    ignored = git_info(str(repo / "x.tmp.yaml"))
    assert ignored is not None and ignored.dirty


def test_commit_follows_head(repo: Path) -> None:
    (repo / "top.yaml").write_text("name: top2\n", encoding="utf-8")
    git(repo, "commit", "-q", "-am", "second")
    info = git_info(str(repo / "top.yaml"))
    assert info is not None and not info.dirty
    assert info.commit == git(repo, "rev-parse", "HEAD")


def test_path_with_odd_characters(repo: Path) -> None:
    name = "flows/a b:[x]*é.yaml"
    (repo / name).write_text("name: odd\n", encoding="utf-8")
    assert git_info(str(repo / name)) == GitInfo(git(repo, "rev-parse", "HEAD"), name, True)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "odd")
    info = git_info(str(repo / name))
    assert info is not None and info.path == name and not info.dirty


def test_outside_a_repository(tmp_path: Path) -> None:
    path = tmp_path / "loose.yaml"
    path.write_text("name: loose\n", encoding="utf-8")
    assert git_info(str(path)) is None


def test_missing_file(repo: Path) -> None:
    assert git_info(str(repo / "nope.yaml")) is None


def test_repository_without_a_commit(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "f.yaml").write_text("name: f\n", encoding="utf-8")
    assert git_info(str(tmp_path / "f.yaml")) is None


def test_git_missing(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(repo / "no-bin-here"))
    assert git_info(str(repo / "top.yaml")) is None


def test_git_too_slow(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gitinfo, "GIT_TIMEOUT_S", 0.0)
    assert git_info(str(repo / "top.yaml")) is None

"""The repository's ``.pre-commit-hooks.yaml`` (https://pre-commit.com/#new-hooks): it
parses, its ``cyclone-flow-lint`` hook has the keys pre-commit requires, selects flow
files and no other YAML, and its entry is the real ``cyclone-flow lint`` (run here on
files as pre-commit passes them, no network, no pre-commit needed)."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import yaml
from helpers.cli import run_cli
from helpers.paths import FLOWS, REPO

from cyclone_flow.cli.init_cmds import HOOK

MANIFEST = REPO / ".pre-commit-hooks.yaml"
# the keys a hook of a .pre-commit-hooks.yaml may have (pre-commit's manifest schema)
KEYS = {
    "id", "name", "entry", "language", "files", "exclude", "types", "types_or",
    "exclude_types", "always_run", "fail_fast", "verbose", "pass_filenames",
    "require_serial", "description", "language_version", "minimum_pre_commit_version",
    "args", "stages", "additional_dependencies",
}  # fmt: skip


def _hook() -> dict[str, Any]:
    hooks = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    assert isinstance(hooks, list), "the manifest is a list of hooks"
    (hook,) = [h for h in hooks if h.get("id") == "cyclone-flow-lint"]
    return dict(hook)


def test_the_hook_has_the_keys_pre_commit_requires() -> None:
    hook = _hook()
    assert {"id", "name", "entry", "language"} <= set(hook) <= KEYS
    assert hook["language"] == "python"  # pre-commit pip-installs this repository
    assert all(isinstance(hook[k], str) for k in ("id", "name", "entry", "files"))
    assert {k: hook[k] for k in HOOK} == HOOK  # what `init`'s config mirrors


def test_the_entry_is_a_console_script_of_this_package() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]["scripts"]
    assert shlex.split(_hook()["entry"])[0] in scripts


def test_files_selects_flow_files_only() -> None:
    files = re.compile(_hook()["files"])
    for path in ("flows/a.yaml", "flows/sub/b.yml", "app/flows/c.yaml", "examples/flows/x.yaml"):
        assert files.search(path), path
    for path in (".pre-commit-config.yaml", ".github/workflows/ci.yaml", "flows.yaml",
                 "myflows/a.yaml", "flows/notes.md", "docker-compose.yml"):  # fmt: skip
        assert not files.search(path), path


def _run_entry(*files: str | Path) -> Any:
    argv = shlex.split(_hook()["entry"])
    return run_cli(*argv[1:], *map(str, files), cwd=REPO, timeout=120)


def test_the_entry_lints_the_files_pre_commit_passes(tmp_path: Path) -> None:
    good = _run_entry(
        FLOWS.relative_to(REPO) / "hello.yaml", FLOWS.relative_to(REPO) / "stocks.yaml"
    )
    assert (good.returncode, good.stdout) == (0, ""), good.stdout + good.stderr
    bad = tmp_path / "flows" / "bad.yaml"
    bad.parent.mkdir()
    bad.write_text("name: bad\nnodes:\n  a: {call: pkg.mod:a, needs: [nope]}\n", encoding="utf-8")
    failed = _run_entry(FLOWS / "hello.yaml", bad)
    assert failed.returncode == 1
    assert f"{bad}:3:" in failed.stdout + failed.stderr
    assert "error[E" in failed.stdout + failed.stderr

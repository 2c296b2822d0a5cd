"""``cyclone-flow init [DIR]`` (the real console script): the project it writes lints with
``--check-imports`` and runs with ``cyclone-flow run`` from its folder; it refuses to
overwrite (exit 1, naming the files, writing nothing) unless ``--force``; the editor
association points the flow files at the shipped schema; its pre-commit config runs the
repository's ``cyclone-flow-lint`` hook."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import yaml
from helpers.cli import Runner, clean_env, json_output, no_traceback, run_cli
from helpers.paths import CLI, REPO

FILES = [
    "flows/example.yaml",
    "handlers/__init__.py",
    "handlers/example.py",
    "schemas/flow.schema.json",
    ".vscode/settings.json",
    ".pre-commit-config.yaml",
]


def _on_path() -> dict[str, str]:
    """The environment of an activated virtual environment: this ``cyclone-flow`` first
    on PATH."""
    return clean_env(PATH=os.pathsep.join([str(CLI.parent), os.environ.get("PATH", "")]))


def _without_venv() -> dict[str, str]:
    """PATH without the folder of this ``cyclone-flow`` (a virtual environment that was
    not activated) and without any other ``cyclone-flow``."""
    return clean_env(PATH="/usr/bin:/bin")


def test_init_writes_a_project_that_lints_and_runs(cli: Runner, tmp_path: Path) -> None:
    proc = run_cli("init", "proj", cwd=tmp_path, env=_on_path())
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    project = tmp_path / "proj"
    for rel in FILES:
        assert (project / rel).is_file(), rel
        assert f"  {rel}\n" in proc.stdout, proc.stdout
    assert "cd proj && cyclone-flow run flows/example.yaml" in proc.stdout

    lint = run_cli("lint", "--check-imports", "flows/", cwd=project)
    no_traceback(lint)
    assert (lint.returncode, lint.stdout) == (0, ""), lint.stdout + lint.stderr
    assert "no problems found" in lint.stderr

    run = cli("run", "flows/example.yaml", "--json", cwd=project)
    no_traceback(run)
    assert run.returncode == 0, run.stderr
    data = json_output(run.stdout)
    assert data["state"] == "completed"
    assert data["output"] == {"shout": {"message": "HELLO, WORLD!"}}

    named = cli("run", "flows/example.yaml", "--input", '{"name": "Ada"}', cwd=project)
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout) == {"shout": {"message": "HELLO, ADA!"}}


def test_init_in_the_current_folder_says_the_command_to_run(tmp_path: Path) -> None:
    proc = run_cli("init", cwd=tmp_path, env=_on_path())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "  cyclone-flow run flows/example.yaml"
    assert (tmp_path / "flows" / "example.yaml").is_file()


def test_init_without_an_activated_venv_prints_commands_that_work(tmp_path: Path) -> None:
    proc = run_cli("init", "proj", cwd=tmp_path, env=_without_venv())
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    *_, hint, command = proc.stdout.splitlines()
    assert command == f"  cd proj && {CLI} run flows/example.yaml", proc.stdout
    lint = shlex.split(hint.split("`")[1])
    assert lint == [str(CLI), "lint", "--check-imports", "flows/"], hint
    # the printed commands, as a shell without the venv on PATH runs them
    done = subprocess.run(
        " ".join(lint),
        shell=True,
        cwd=tmp_path / "proj",
        env=_without_venv(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no problems found" in done.stderr


def test_init_writes_or_completes_the_gitignore(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    assert run_cli("init", str(fresh), cwd=tmp_path).returncode == 0
    assert (fresh / ".gitignore").read_text(encoding="utf-8") == ".cyclone/\n"

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / ".gitignore").write_text("node_modules/\n*.pyc", encoding="utf-8")
    proc = run_cli("init", str(mine), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "  .gitignore (.cyclone/ appended)" in proc.stdout
    text = (mine / ".gitignore").read_text(encoding="utf-8")
    assert text == "node_modules/\n*.pyc\n.cyclone/\n"

    again = run_cli("init", "--force", str(mine), cwd=tmp_path)  # it has the line: kept as is
    assert again.returncode == 0, again.stderr
    assert ".gitignore" not in again.stdout
    assert (mine / ".gitignore").read_text(encoding="utf-8") == text


def test_init_refuses_existing_files_unless_force(tmp_path: Path) -> None:
    (tmp_path / "handlers").mkdir()
    (tmp_path / "handlers" / "example.py").write_text("mine\n", encoding="utf-8")
    (tmp_path / ".vscode").mkdir()
    (tmp_path / ".vscode" / "settings.json").write_text("{}\n", encoding="utf-8")

    proc = run_cli("init", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 1
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: 2 file(s) exist already in .: ")
    assert "handlers/example.py" in line and ".vscode/settings.json" in line
    assert "--force" in line
    # nothing was written, nothing changed
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        ".vscode/settings.json",
        "handlers/example.py",
    ]
    assert (tmp_path / "handlers" / "example.py").read_text(encoding="utf-8") == "mine\n"

    forced = run_cli("init", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "  handlers/example.py (overwritten)" in forced.stdout
    assert "def greet(ctx" in (tmp_path / "handlers" / "example.py").read_text(encoding="utf-8")


def test_init_into_a_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("", encoding="utf-8")
    proc = run_cli("init", "taken", cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith("error: ")
    assert "'taken' is a file" in proc.stderr


def test_init_that_cannot_write_a_file_leaves_no_folder_behind(tmp_path: Path) -> None:
    project = tmp_path / "new" / "project"
    project.mkdir(parents=True)
    (project / "handlers").write_text("a file where the package goes", encoding="utf-8")
    proc = run_cli("init", str(project), cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 1
    assert f"error: cannot write the project files in {project}" in proc.stderr
    # flows/ was made before handlers/ failed: it is gone again, nothing else was written
    assert sorted(p.name for p in project.iterdir()) == ["handlers"]  # no .gitignore either


def test_init_associates_the_flows_with_the_shipped_schema(tmp_path: Path) -> None:
    assert run_cli("init", cwd=tmp_path).returncode == 0
    schema = tmp_path / "schemas" / "flow.schema.json"
    assert schema.read_bytes() == (REPO / "schemas" / "flow.schema.json").read_bytes()
    settings = json.loads((tmp_path / ".vscode" / "settings.json").read_text(encoding="utf-8"))
    ((target, globs),) = settings["yaml.schemas"].items()
    assert (tmp_path / target).resolve() == schema.resolve()
    assert "flows/*.yaml" in globs
    first = (tmp_path / "flows" / "example.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=../schemas/flow.schema.json"
    assert (tmp_path / "flows" / "../schemas/flow.schema.json").resolve() == schema.resolve()


def test_init_pre_commit_config_runs_the_repository_hook(tmp_path: Path) -> None:
    assert run_cli("init", cwd=tmp_path).returncode == 0
    config = yaml.safe_load((tmp_path / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    ((repo,),) = [config["repos"]]
    assert repo["repo"] == "local"
    ((hook,),) = [repo["hooks"]]
    (upstream,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    for key in ("id", "name", "entry", "files"):
        assert hook[key] == upstream[key], key
    assert hook["language"] == "system"
    # what pre-commit would run on the staged flow file: entry + args + file names
    argv = shlex.split(hook["entry"]) + hook.get("args", []) + ["flows/example.yaml"]
    assert argv[0] == "cyclone-flow"
    proc = run_cli(*argv[1:], cwd=tmp_path)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert CLI.exists()

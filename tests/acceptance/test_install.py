"""Packaging: a NON-editable ``pip install`` of the repository into a fresh virtualenv ships
the flow JSON Schema and the SQL migrations inside the wheel, so the installed CLI lints,
migrates and runs from a folder that is not the repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from helpers.cli import clean_env, no_traceback
from helpers.paths import EXAMPLES, FLOWS, REPO
from psycopg import sql

IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".cyclone",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    "tests",
    "docs",
)


def _run(
    cmd: list[str | Path], cwd: Path, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(name, None)
    return subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """A fresh virtualenv with cyclone-flow installed from a copy of the repository (the
    copy keeps pip's in-tree build from writing build/ and *.egg-info into the checkout)."""
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=IGNORE)
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", venv], cwd=tmp_path, timeout=300)
    assert made.returncode == 0, made.stderr
    pip = _run(
        [venv / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check", source],
        cwd=tmp_path,
    )
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return venv


def test_installed_wheel_lints_migrates_and_runs(
    installed: Path, tmp_path: Path, database_url: str
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    cli = installed / "bin" / "cyclone-flow"
    assert cli.exists()

    where = _run(
        [
            installed / "bin" / "python",
            "-c",
            "import cyclone_flow, cyclone_flow.resources as r\n"
            "print(cyclone_flow.__file__)\n"
            "for d in (r.migrations_dir(), r.schemas_dir()):\n"
            "    for f in d.iterdir():\n"
            "        if f.name.endswith(('.sql', '.json')): print(f)\n",
        ],
        cwd=empty,
    )
    assert where.returncode == 0, where.stderr
    site = str(installed / "lib")
    for line in where.stdout.splitlines():
        assert line.startswith(site), f"not from the installed wheel: {line}"
    assert str(REPO) not in where.stdout
    shipped = {Path(line).name for line in where.stdout.splitlines()}
    assert {"flow.schema.json", "0001_initial.sql"} <= shipped, where.stdout

    lint = _run([cli, "lint", FLOWS], cwd=empty)
    no_traceback(lint)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    schema = f"inst_{uuid.uuid4().hex[:12]}"
    try:
        migrate = _run([cli, "migrate", "--database-url", database_url, "--schema", schema], empty)
        no_traceback(migrate)
        assert migrate.returncode == 0, migrate.stderr
        assert migrate.stdout.startswith("applied migrations 1"), migrate.stdout

        run = _run(
            [
                cli,
                "run",
                FLOWS / "hello.yaml",
                "--import-path",
                EXAMPLES,
                "--database-url",
                database_url,
                "--schema",
                schema,
                "--json",
            ],
            cwd=empty,
        )
        no_traceback(run)
        assert run.returncode == 0, run.stderr
        assert '"HELLO, WORLD!"' in run.stdout
        assert not (empty / ".cyclone").exists()
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))

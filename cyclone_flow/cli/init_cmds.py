"""``cyclone-flow init [DIR]``: the files a new project starts from: one example flow, a
handler package with its handlers, the flow JSON Schema with the editor association
(VS Code's ``yaml.schemas``, and the ``yaml-language-server`` comment every editor with
the YAML language server reads), a pre-commit hook config and ``.cyclone/`` in the
``.gitignore``. It writes nothing when a file exists already, unless ``--force``."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from pathlib import Path

import click

from cyclone_flow.cli.common import handle_errors
from cyclone_flow.handlers import own_command
from cyclone_flow.resources import schemas_dir

__all__ = ["HOOK", "init_cmd", "project_files"]

HOOK: dict[str, str] = {
    "id": "cyclone-flow-lint",
    "name": "cyclone-flow lint",
    "entry": "cyclone-flow lint",
    "files": r"(^|/)flows/.+\.ya?ml$",
}
"""The ``cyclone-flow-lint`` hook of the repository's ``.pre-commit-hooks.yaml`` (id,
name, entry, files); the config ``init`` writes runs the same hook locally."""

EXAMPLE_FLOW = """\
# yaml-language-server: $schema=../schemas/flow.schema.json
#
# An example flow written by `cyclone-flow init`: greet --> shout. Its handlers are in
# handlers/example.py; every key is described in cyclone-flow's docs/flow-reference.md.
#
#   cyclone-flow lint --check-imports flows/     # check it, and that its calls import
#   cyclone-flow run flows/example.yaml          # run it (an embedded Postgres in .cyclone/)
#   cyclone-flow run flows/example.yaml --input '{"name": "Ada"}'
name: example
description: Greet someone, then shout the greeting.
input_schema:
  type: object
  properties:
    name: {type: string, minLength: 1, maxLength: 100, default: world}
  additionalProperties: false
nodes:
  greet:
    call: handlers.example:greet
    input: {name: "${{ run.input.name }}"}
  shout:
    call: handlers.example:shout
    needs: [greet]
    input: {text: "${{ nodes.greet.output.greeting }}"}
    retry: {max_attempts: 3, backoff: {initial: 1s}}
    timeout: 30s
"""

HANDLERS_INIT = '''\
"""The handlers of this project's flows (flows/*.yaml), one module per flow."""
'''

EXAMPLE_HANDLERS = '''\
"""The handlers of flows/example.yaml.

A handler is a plain function called as ``fn(ctx, input)``: ``input`` is its node's
``input`` from the flow file with the references filled in, and what it returns (JSON)
is the node's output. ``ctx.log`` is a logger whose lines `cyclone-flow logs RUN` shows
(so are ``print``s); ``ctx.run_id``, ``ctx.attempt`` and ``ctx.completion_tx()`` (a
connection inside the transaction that completes the step: rows written there commit
with it, exactly once) are there too. Raise ``cyclone_flow.PermanentError`` to fail
without the retries left.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cyclone_flow import Context


def greet(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """``{"name": "Ada"}`` -> ``{"greeting": "Hello, Ada!"}``."""
    ctx.log.info("greeting %s", input["name"])
    return {"greeting": f"Hello, {input['name']}!"}


def shout(ctx: Context, input: dict[str, Any]) -> dict[str, Any]:
    """``{"text": "Hello, Ada!"}`` -> ``{"message": "HELLO, ADA!"}``."""
    return {"message": input["text"].upper()}
'''

VSCODE_SETTINGS = (
    json.dumps(
        {
            "yaml.schemas": {
                "./schemas/flow.schema.json": [
                    "flows/*.yaml",
                    "flows/*.yml",
                    "flows/**/*.yaml",
                    "flows/**/*.yml",
                ]
            }
        },
        indent=2,
    )
    + "\n"
)

PRE_COMMIT_CONFIG = f"""\
# pre-commit (https://pre-commit.com): after `pre-commit install`, every commit lints the
# flow files it changes. This is the {HOOK["id"]} hook of cyclone-flow's
# .pre-commit-hooks.yaml, run with the cyclone-flow of this project's environment
# (language: system), so --check-imports imports your handlers with your dependencies.
repos:
  - repo: local
    hooks:
      - id: {HOOK["id"]}
        name: {HOOK["name"]}
        entry: {HOOK["entry"]}
        language: system
        files: '{HOOK["files"]}'
        args: [--check-imports]
"""


GITIGNORE_LINE = ".cyclone/"
"""The line ``init`` makes sure the project's ``.gitignore`` has: the embedded Postgres of
``cyclone-flow run`` lives in ``.cyclone/``."""


def project_files() -> dict[str, str]:
    """The files ``init`` writes, relative path (``/``-separated) -> text, in the order
    written; the schema is the installed ``flow.schema.json``."""
    schema = (schemas_dir() / "flow.schema.json").read_text("utf-8")
    return {
        "flows/example.yaml": EXAMPLE_FLOW,
        "handlers/__init__.py": HANDLERS_INIT,
        "handlers/example.py": EXAMPLE_HANDLERS,
        "schemas/flow.schema.json": schema,
        ".vscode/settings.json": VSCODE_SETTINGS,
        ".pre-commit-config.yaml": PRE_COMMIT_CONFIG,
    }


def _gitignore(root: Path) -> str | None:
    """The text of ``root/.gitignore`` with :data:`GITIGNORE_LINE` (the file's own text
    with the line appended when it lacks it), or None when it has it already. Raises
    OSError."""
    path = root / ".gitignore"
    if not path.exists():
        return GITIGNORE_LINE + "\n"
    text = path.read_text("utf-8", errors="replace")
    if any(line.strip().strip("/") == ".cyclone" for line in text.splitlines()):
        return None
    return text + ("" if not text or text.endswith("\n") else "\n") + GITIGNORE_LINE + "\n"


def _write_all(root: Path, files: dict[str, str]) -> None:
    """Write every file or none: each goes to a temporary file next to it first, and
    only when all are written are they renamed into place; when one cannot be written,
    the folders made for them are removed again. Raises OSError."""
    temps: list[tuple[Path, Path]] = []
    made: list[Path] = []  # folders this call created, outermost first
    done = False
    try:
        for rel, text in files.items():
            path = root / rel
            missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
            path.parent.mkdir(parents=True, exist_ok=True)
            made.extend(reversed(missing))
            temp = path.with_name(f".{path.name}.cyclone-init")
            temps.append((temp, path))
            temp.write_text(text, "utf-8")
        for temp, path in temps:
            os.replace(temp, path)
        done = True
    finally:
        for temp, _path in temps:
            temp.unlink(missing_ok=True)
        if not done:
            for folder in reversed(made):
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only when empty


@click.command("init")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Overwrite the files that exist already.")
@handle_errors
def init_cmd(directory: str, force: bool) -> None:
    """Start a project in DIRECTORY (default: the current folder): flows/example.yaml,
    the handler package handlers/ with its handlers, schemas/flow.schema.json with the
    editor association (.vscode/settings.json) and a .pre-commit-config.yaml running
    `cyclone-flow lint`, and .cyclone/ in .gitignore (appended to one that lacks it).
    Exit 1, writing nothing, when one of these files exists (unless --force). Prints what
    it wrote and the command to run next (this script by its path when `cyclone-flow` on
    PATH is another or none)."""
    root = Path(directory)
    files = project_files()
    existing = [rel for rel in files if (root / rel).exists() or (root / rel).is_symlink()]
    if existing and not force:
        click.echo(
            f"error: {len(existing)} file(s) exist already in {root}: {', '.join(existing)}; "
            "nothing was written (--force overwrites them)",
            err=True,
        )
        sys.exit(1)
    try:
        ignore = _gitignore(root)
        had_ignore = (root / ".gitignore").exists()
        _write_all(root, {**files, **({".gitignore": ignore} if ignore is not None else {})})
    except OSError as exc:
        click.echo(f"error: cannot write the project files in {root}: {exc}", err=True)
        sys.exit(1)
    click.echo(f"wrote a cyclone-flow project in {root}:")
    for rel in files:
        click.echo(f"  {rel}{' (overwritten)' if rel in existing else ''}")
    if ignore is not None:
        said = f"{GITIGNORE_LINE} appended" if had_ignore else GITIGNORE_LINE
        click.echo(f"  .gitignore ({said})")
    cd = "" if root.resolve() == Path.cwd().resolve() else f"cd {shlex.quote(directory)} && "
    me = own_command()
    click.echo(f"next, run the example flow (`{me} lint --check-imports flows/` checks it):")
    click.echo(f"  {cd}{me} run flows/example.yaml")

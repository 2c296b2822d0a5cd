"""The migrate command a worker on an unmigrated schema names (``worker_cmd``): the
``--database-url`` given on the command line, its password hidden; none when the URL
came from the environment (``migrate`` reads it there too)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from cyclone_flow.cli.common import _without_password, database_options, migrate_command


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/app", "postgresql://app:***@db:5432/app"),
        ("postgresql://app@db/app", "postgresql://app@db/app"),
        ("postgresql://db/app?password=s3cret", "URL"),
        ("host=db dbname=app password=s3cret", "dbname=app host=db password=***"),
    ],
)
def test_the_password_is_never_shown(url: str, shown: str) -> None:
    hidden = _without_password(url)
    assert "s3cret" not in hidden
    if "=" in shown and "://" not in shown:  # conninfo: the same keywords, in any order
        assert sorted(hidden.split()) == sorted(shown.split())
    else:
        assert hidden == shown


@click.command()
@database_options
def _hint(database_url: str | None, schema: str) -> None:
    click.echo(migrate_command(database_url, schema))


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (
            ["--database-url", "postgresql://app:pw@db/app"],
            {},
            "cyclone-flow migrate --database-url 'postgresql://app:***@db/app'",
        ),
        ([], {"CYCLONE_DATABASE_URL": "postgresql://app:pw@db/app"}, "cyclone-flow migrate"),
        ([], {}, "cyclone-flow migrate"),
        (["--schema", "tenant_a"], {}, "cyclone-flow migrate --schema tenant_a"),
    ],
    ids=["command-line", "environment", "embedded", "schema"],
)
def test_the_migrate_command_uses_the_same_database(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    result = CliRunner().invoke(
        _hint, args, env={"CYCLONE_DATABASE_URL": None, "CYCLONE_SCHEMA": None, **env}
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == expected

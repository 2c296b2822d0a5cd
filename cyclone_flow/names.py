"""Names that every layer checks the same way: Postgres schema names, queue names and
signal names, the default queue, and the default name of a schedule (shared by the
options, the flow-file pipeline, the database code, the Client and the CLI).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from cyclone_flow.errors import ConfigError

__all__ = [
    "DEFAULT_QUEUE",
    "LIMITED_OWNER",
    "QUEUE_NAME_RE",
    "QUEUE_NAME_RULE",
    "SIGNAL_NAME_RE",
    "SIGNAL_NAME_RULE",
    "is_queue_name",
    "is_signal_name",
    "schedule_default_name",
    "validate_queue_name",
    "validate_schema_name",
]

DEFAULT_QUEUE = "default"
"""The queue of a node that names none (and of a worker started without queues)."""

LIMITED_OWNER = "~limits"
"""The ``claim_owner`` of a step with limits (``concurrency:`` / ``rate_limit:``), as the
SQL writes it (migrations/0011_flow_control.sql): the generic claim leaves such a step to
the limited claim. No client may take it as its id."""

QUEUE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
QUEUE_NAME_RULE = "1-63 lowercase letters, digits, '_', '.', '-' starting with a letter or digit"
"""What :data:`QUEUE_NAME_RE` accepts, for error messages."""

SIGNAL_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$")  # as in flow.schema.json
SIGNAL_NAME_RULE = (
    "letters, digits, '_', '.', ':', '-' (at most 128, not starting with '.', ':' or '-')"
)
"""What :data:`SIGNAL_NAME_RE` accepts, for error messages."""

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def validate_schema_name(schema: Any) -> str:
    """Return ``schema`` if it is a plain lowercase identifier; raise :class:`ConfigError`."""
    if not isinstance(schema, str) or not _SCHEMA_RE.fullmatch(schema):
        raise ConfigError(
            f"invalid schema name {schema!r}: use lowercase letters, digits and _ "
            "(at most 63 characters, not starting with a digit)"
        )
    return schema


def is_queue_name(name: Any) -> bool:
    """True when ``name`` is a valid queue name (see :data:`QUEUE_NAME_RULE`)."""
    return isinstance(name, str) and QUEUE_NAME_RE.fullmatch(name) is not None


def validate_queue_name(name: Any) -> str:
    """Return ``name`` if it is a valid queue name; raise :class:`ConfigError`."""
    if not is_queue_name(name):
        raise ConfigError(f"invalid queue name {name!r}: use {QUEUE_NAME_RULE}")
    return str(name)


def is_signal_name(name: Any) -> bool:
    """True when ``name`` is a valid signal name (see :data:`SIGNAL_NAME_RULE`)."""
    return isinstance(name, str) and SIGNAL_NAME_RE.fullmatch(name) is not None


def schedule_default_name(flow: str, cron: str, timezone: str = "UTC", input: Any = None) -> str:
    """The name of a schedule given none: ``<flow>-<8 hex>``, the start of the sha256 of
    the canonical JSON (sorted keys, no spaces) of its ``cron``, ``timezone`` and
    ``input`` (as written, before the ``input_schema`` defaults are filled). It depends on
    nothing else, so a flow file's unnamed schedule keeps its name when others are added,
    removed or reordered, and adding one schedule twice (``schedule add``) is one; changing
    its cron, time zone or input makes it another schedule. Lint (E052) and ``schedule
    sync`` / ``schedule add`` use it alike."""
    canonical = json.dumps(
        {"cron": cron, "timezone": timezone, "input": input},
        sort_keys=True,
        separators=(",", ":"),
        default=str,  # lint may see YAML values JSON has not (E004 reports them)
    )
    return f"{flow}-{hashlib.sha256(canonical.encode('utf-8')).hexdigest()[:8]}"

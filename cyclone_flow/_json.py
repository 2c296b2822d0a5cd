"""The engine's JSON: how values are encoded for the database (compact, UTF-8 kept), decoded,
checked for what Postgres cannot store, and bounded (inputs, outputs and signals alike).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from cyclone_flow.errors import PayloadTooLargeError
from cyclone_flow.text import printable, unstorable

__all__ = [
    "JSON",
    "OUTPUT_SHOWN_BYTES",
    "PayloadKind",
    "Unencodable",
    "contains_nul",
    "dumps",
    "encode_payload",
    "loads",
    "printable",
    "shown_json",
]

JSON = Any
"""A JSON value: dict, list, str, int, float, bool or None."""

PayloadKind = Literal["input", "output", "signal"]

_NOUN: dict[str, str] = {"input": "input", "output": "handler output", "signal": "payload"}


class Unencodable(ValueError):
    """A payload that cannot be stored: not JSON, or holding a string Postgres cannot store
    (a NUL, a lone surrogate). The message says which (``input is not JSON: ...``,
    ``payload contains a NUL character (U+0000), which Postgres cannot store``); callers
    turn it into their own error (InputValidationError, a failed attempt). ``reason`` is
    the message without its noun (``not JSON: ...``, ``contains a NUL character ...``)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


OUTPUT_SHOWN_BYTES = 64 * 1024
"""The most bytes of JSON text a reader shows of one value in place (the dashboard's
pretty JSON, a step's ``output`` in the CLI's ``--json`` documents); the rest: a download
link, ``cyclone-flow output``."""


def shown_json(value: JSON, max_bytes: int = OUTPUT_SHOWN_BYTES) -> tuple[JSON, bool]:
    """``value`` and False when its JSON text (UTF-8, as jsonb prints it) is at most
    ``max_bytes``; else None and True (cut: a reader shows no half value)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= max_bytes and len(text.encode()) <= max_bytes:
        return value, False
    return None, True


def dumps(value: JSON) -> str:
    """Encode a JSON value the way the engine stores it (compact, UTF-8 kept). Raises
    TypeError / ValueError for a value that is not JSON, including one nested too deeply
    for the encoder (about a thousand levels)."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except RecursionError:
        raise ValueError("the value is nested too deeply") from None


def loads(value: Any) -> JSON:
    """Decode JSON text (as ``::text`` columns return it); any other value (a jsonb column
    psycopg decoded already) is returned as it is."""
    return json.loads(value) if isinstance(value, str) else value


def contains_nul(value: JSON) -> bool:
    """True when a string (or key) inside ``value`` holds U+0000, which jsonb cannot store.
    Iterative, so any nesting depth is safe."""
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def encode_payload(kind: PayloadKind, value: JSON, limit: int) -> str:
    """``value`` encoded with :func:`dumps`, checked before anything is written: a run
    ``input``, a handler's ``output`` or a ``signal`` payload, at most ``limit`` bytes of
    UTF-8.

    Raises :class:`Unencodable` (not JSON, or a string Postgres cannot store) and
    :class:`~cyclone_flow.errors.PayloadTooLargeError` (``kind``, size, ``limit``)."""
    noun = _NOUN[kind]
    try:
        text = dumps(value)
    except (TypeError, ValueError) as exc:
        raise Unencodable(f"{noun} is not JSON: {exc}", f"not JSON: {exc}") from exc
    # ``text`` holds ``\u0000`` wherever a string of ``value`` holds a NUL, and a lone
    # surrogate as itself (which UTF-8 refuses): only then is there anything to look for
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        size = -1
    reason = unstorable(value) if size < 0 or "\\u0000" in text else None
    if reason is None and size < 0:
        reason = "a string that is not UTF-8 text"
    if reason is not None:
        raise Unencodable(
            f"{noun} contains {reason}, which Postgres cannot store",
            f"contains {reason}, which Postgres cannot store",
        )
    if size > limit:
        raise PayloadTooLargeError(kind, size, limit)
    return text

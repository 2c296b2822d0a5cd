"""Run ids as users type them: a full UUID, or its first hex digits (the CLI's progress
and the dashboard show ``a3834a92``). One rule for ``Client.resolve_run_id``, every
method that takes a run id, and the dashboard's search box."""

from __future__ import annotations

import uuid

from cyclone_flow.errors import RunNotFoundError

__all__ = [
    "AMBIGUOUS_RUN_IDS_SHOWN",
    "MIN_RUN_ID_PREFIX",
    "is_run_id_start",
    "is_short_hex",
    "parse_run_id",
    "prefix_bounds",
]

MIN_RUN_ID_PREFIX = 4
"""The fewest hex digits :meth:`Client.resolve_run_id` takes as the start of a run id."""
AMBIGUOUS_RUN_IDS_SHOWN = 10
"""How many matching ids an :class:`~cyclone_flow.errors.AmbiguousRunIdError` lists."""

_HEX = frozenset("0123456789abcdef")


def parse_run_id(run_id: str | uuid.UUID) -> str:
    """Normalise a run id (lower-case, hyphenated UUID text); raise
    :class:`~cyclone_flow.errors.RunNotFoundError` for text that is not a UUID."""
    try:
        return str(uuid.UUID(str(run_id)))
    except ValueError:
        raise RunNotFoundError(str(run_id)) from None


def prefix_bounds(prefix: object) -> tuple[str, str] | None:
    """The lowest and highest uuid starting with ``prefix`` (hex digits, hyphens where a
    uuid has them); None when ``prefix`` is not such a start of at least
    :data:`MIN_RUN_ID_PREFIX` digits (nor of fewer than 32)."""
    if not isinstance(prefix, str):
        return None
    text = prefix.lower()
    digits = text.replace("-", "")
    if not (MIN_RUN_ID_PREFIX <= len(digits) < 32) or any(c not in _HEX for c in digits):
        return None
    low = str(uuid.UUID(digits.ljust(32, "0")))
    if not low.startswith(text):  # a hyphen where a uuid has none
        return None
    return low, str(uuid.UUID(digits.ljust(32, "f")))


def is_short_hex(text: str) -> bool:
    """Whether ``text`` is hex digits (hyphens aside), fewer than :data:`MIN_RUN_ID_PREFIX`:
    the start of a run id, too short to look up (``RunIdTooShortError``)."""
    digits = text.replace("-", "").lower()
    return 0 < len(digits) < MIN_RUN_ID_PREFIX and all(c in _HEX for c in digits)


def is_run_id_start(text: str) -> bool:
    """Whether ``text`` names a run the way ``Client.resolve_run_id`` reads it: a full run
    id, or the start of one of at least :data:`MIN_RUN_ID_PREFIX` hex digits."""
    try:
        parse_run_id(text)
    except RunNotFoundError:
        return prefix_bounds(text) is not None
    return True

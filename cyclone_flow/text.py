"""Strings that Postgres cannot store, time zone names that are safe to look up, and
did-you-mean suggestions for a misspelt name.

Postgres ``text`` and ``jsonb`` hold UTF-8 without U+0000. A Python ``str`` can hold both a
NUL (``"\\0"``, ``"\\u0000"`` escapes in YAML or JSON) and lone surrogates U+D800-U+DFFF
(``"\\ud800"`` escapes, or command-line bytes that are not UTF-8, which Python decodes to
U+DC80-U+DCFF): neither can be written, so every string from a flow file, the CLI or the
API is checked with these functions before it reaches the database.

Examples
--------
>>> unstorable({"note": "a\\x00b"})
'a NUL character (U+0000)'
>>> unstorable(["ok", "\\ud800"])
'a lone surrogate (U+D800) that is not UTF-8 text'
>>> unstorable({"fine": [1, 2.5, None, "é"]}) is None
True
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "HOST_ZONE_NAMES",
    "MAX_ZONE_NAME_CHARS",
    "describe_unstorable",
    "did_you_mean",
    "iter_unstorable",
    "printable",
    "storable",
    "unstorable",
    "zone_info",
]

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

MAX_ZONE_NAME_CHARS = 255
"""The longest time zone name looked up (IANA names are at most ~30 characters; a longer
one would make ``zoneinfo`` open a file whose name is too long)."""

Path = tuple[str | int, ...]


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` (or ``"'x' or 'y'"``) naming the candidates closest to
    ``word`` (:func:`difflib.get_close_matches`, at most 2, similarity 0.6 or more), or
    ``""`` when none is close. For the end of an error message about an unknown name."""
    matches = difflib.get_close_matches(word, sorted(set(candidates) - {word}), n=2)
    if not matches:
        return ""
    return "; did you mean " + " or ".join(repr(m) for m in matches) + "?"


def describe_unstorable(text: str) -> str | None:
    """What Postgres cannot store in ``text`` (its first such character), or None.

    >>> describe_unstorable("tab\\tis fine") is None
    True
    """
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return "a NUL character (U+0000)"
    return f"a lone surrogate (U+{ord(char):04X}) that is not UTF-8 text"


def storable(name: object) -> bool:
    """False for a string Postgres cannot compare (a NUL or a lone surrogate): no row holds
    such a name, so a lookup by it finds nothing. True for anything else."""
    return not isinstance(name, str) or describe_unstorable(name) is None


def iter_unstorable(value: object, path: Path = ()) -> Iterator[tuple[Path, bool, str]]:
    """Every string inside the JSON ``value`` that Postgres cannot store, in document
    order: ``(path, is_key, reason)``, where ``path`` leads to the value (for a mapping key,
    to the value under that key, with ``is_key`` True). Iterative: any depth is safe."""
    stack: list[tuple[object, Path]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            reason = describe_unstorable(item)
            if reason is not None:
                yield where, False, reason
        elif isinstance(item, dict):
            entries = list(item.items())
            for key, _ in entries:
                if isinstance(key, str) and (reason := describe_unstorable(key)) is not None:
                    yield (*where, key), True, reason
            stack.extend(((v, (*where, str(k))) for k, v in reversed(entries)))
        elif isinstance(item, list | tuple):
            stack.extend((v, (*where, i)) for i, v in reversed(list(enumerate(item))))


def unstorable(value: object) -> str | None:
    """The reason the first unstorable string in the JSON ``value`` cannot be stored (see
    :func:`describe_unstorable`), or None when every string and key can be."""
    for _, _, reason in iter_unstorable(value):
        return reason
    return None


def printable(text: str | None) -> str | None:
    """``text`` with NUL characters and lone surrogates spelled out (``\\x00``,
    ``\\ud800``), so that any message (a handler's exception, a traceback) can be stored."""
    if text is None or _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(lambda m: repr(m.group())[1:-1], text)


HOST_ZONE_NAMES = frozenset(("localtime", "posixrules", "Factory"))
"""Files of a zoneinfo folder that are no IANA zone of their own: ``localtime`` is the
host's zone and ``posixrules`` a copy of one, both differing between machines;
``Factory`` is a placeholder ("-00"). Refused, as are the ``posix/`` and ``right/``
trees (copies of the zones, ``right/`` counting leap seconds)."""


def zone_info(name: object) -> ZoneInfo | None:
    """The IANA time zone ``name`` (e.g. ``Europe/Paris``), or None when it is not one:
    not a string, empty, longer than :data:`MAX_ZONE_NAME_CHARS`, holding a character a
    file name cannot, one of :data:`HOST_ZONE_NAMES` or under ``posix/`` or ``right/``
    (whose meaning depends on the host's files), or unknown. Never raises."""
    if not isinstance(name, str) or not name or len(name) > MAX_ZONE_NAME_CHARS:
        return None
    if describe_unstorable(name) is not None:
        return None
    if name in HOST_ZONE_NAMES or name.partition("/")[0] in ("posix", "right"):
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None

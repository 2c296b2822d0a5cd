"""Durations as written in flow files, converted to float seconds.

A duration is either a number of seconds (``30``, ``1.5``) or a string of one or more
``<number><unit>`` parts with units ``ms``, ``s``, ``m``, ``h``, ``d`` and no spaces:
``500ms``, ``30s``, ``5m``, ``1h30m``, ``2d``,
``1.5h``.

Examples
--------
>>> parse_duration("1h30m")
5400.0
>>> format_duration(5400)
'1h30m'
"""

from __future__ import annotations

import math
import re
import warnings

__all__ = [
    "DURATION_PATTERN",
    "MAX_FLOW_DURATION_S",
    "MIN_FLOW_DURATION_S",
    "DurationError",
    "check_seconds",
    "format_duration",
    "format_elapsed",
    "format_span",
    "parse_duration",
    "parse_duration_arg",
]

_UNITS: dict[str, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$"
"""The regular expression a duration string matches (also used in flow.schema.json)."""

MAX_FLOW_DURATION_S = 366 * 86400.0
"""The longest duration a flow file may give (366 days; also ``maximum`` in the schema).

Longer intervals overflow timestamps in the database (``now() + interval``)."""

MIN_FLOW_DURATION_S = 0.001
"""The shortest duration other than 0 a flow file or a submission option may give (1 ms).

Shorter ones cannot be honoured (timestamps have microseconds, waits are polled) and
denormal numbers such as ``1.0e-320`` overflow the retry backoff's arithmetic."""

_WHOLE = re.compile(DURATION_PATTERN)
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_BARE_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")


def parse_duration(text: str | int | float, max_s: float | None = None) -> float:
    """Return the duration ``text`` in seconds (a float >= 0).

    Parameters
    ----------
    text
        A number of seconds, or a string such as ``"500ms"``, ``"30s"``, ``"1h30m"``.
    max_s
        When given, the longest duration accepted, in seconds (e.g.
        :data:`MAX_FLOW_DURATION_S`); a longer one raises ``ValueError``.

    Raises
    ------
    ValueError
        When ``text`` is a bool, a negative or non-finite number, a string that is not
        a sequence of ``<number><unit>`` parts, or longer than ``max_s``; the message
        quotes the value.

    >>> parse_duration("400d", max_s=MAX_FLOW_DURATION_S)
    Traceback (most recent call last):
    ...
    ValueError: invalid duration '400d': longer than the maximum of 366d
    """
    seconds = _parse(text)
    if max_s is not None and seconds > max_s:
        raise ValueError(
            f"invalid duration {text!r}: longer than the maximum of {_format_limit(max_s)}"
        )
    return seconds


def parse_duration_arg(text: str, max_s: float | None = None) -> float:
    """Return the duration ``text`` written as command-line text, in seconds: a bare
    number (``"30"``, ``"1.5"``) is that many seconds, as a number is in a flow file or in
    Python; anything else is read by :func:`parse_duration` (``"500ms"``, ``"1h30m"``).

    Raises ``ValueError`` as :func:`parse_duration` does.

    >>> parse_duration_arg("30"), parse_duration_arg("0"), parse_duration_arg("1m30s")
    (30.0, 0.0, 90.0)
    """
    if not (isinstance(text, str) and _BARE_NUMBER.fullmatch(text)):
        return parse_duration(text, max_s=max_s)
    seconds = float(text)
    if not math.isfinite(seconds):
        raise ValueError(f"invalid duration {text!r}: too large")
    if max_s is not None and seconds > max_s:
        raise ValueError(
            f"invalid duration {text!r}: longer than the maximum of {_format_limit(max_s)}"
        )
    return seconds


class DurationError(ValueError):
    """A number of seconds out of bounds (:func:`check_seconds`). ``kind`` says which bound:
    ``"type"`` (not an int or float, or a bool), ``"sign"`` (negative, not finite, or 0 where
    it must be positive), ``"long"`` (over the maximum) or ``"short"`` (above 0, below the
    minimum). Each caller words its own error from ``kind``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def check_seconds(
    value: object, *, max_s: float, allow_zero: bool = False, min_s: float = 0.0
) -> float:
    """``value`` as float seconds: an int or float (not a bool), finite, above 0 (or 0 when
    ``allow_zero``), at most ``max_s``, and either 0 or at least ``min_s``. The one bound
    check of every seconds option (client options, submission options, CLI durations).

    Raises :class:`DurationError` (a ``ValueError``) naming the bound that failed.

    >>> check_seconds(30, max_s=60)
    30.0
    >>> check_seconds(0, max_s=60, allow_zero=True)
    0.0
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DurationError("type", "must be a number of seconds")
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        raise DurationError("long", f"must be at most {_format_limit(max_s)}") from None
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        raise DurationError("sign", ">= 0" if allow_zero else "must be above 0")
    if seconds > max_s:
        raise DurationError("long", f"must be at most {_format_limit(max_s)}")
    if 0 < seconds < min_s:
        raise DurationError("short", f"must be at least {_format_limit(min_s)}")
    return seconds


def _format_limit(max_s: float) -> str:
    try:
        return format_duration(max_s)
    except ValueError:
        return repr(max_s)


def _parse(text: str | int | float) -> float:
    if isinstance(text, bool):
        raise ValueError(f"invalid duration {text!r}: expected a number of seconds or e.g. '30s'")
    if isinstance(text, int | float):
        try:
            seconds = float(text)
        except OverflowError:  # an int too large for a float
            raise ValueError(f"invalid duration {text!r}: too large") from None
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"invalid duration {text!r}: must be a finite number >= 0")
        return seconds
    if not isinstance(text, str):
        raise ValueError(f"invalid duration {text!r}: expected a string or a number")
    if not _WHOLE.fullmatch(text):
        raise ValueError(
            f"invalid duration {text!r}: expected a number of seconds or parts like "
            "'500ms', '30s', '5m', '1h30m', '2d'"
        )
    total = 0.0
    for number, unit in _PART.findall(text):
        total += float(number) * _UNITS[unit]
    if not math.isfinite(total):
        raise ValueError(f"invalid duration {text!r}: too large")
    return total


def format_duration(seconds: float) -> str:
    """Return a compact duration string for ``seconds``, e.g. ``"1h30m"``, ``"500ms"``, ``"0s"``.

    Whole days, hours, minutes and seconds are written largest first; a remainder below
    one second is written in milliseconds (rounded). ``parse_duration(format_duration(x))``
    equals ``x`` rounded to the millisecond.

    Raises
    ------
    ValueError
        When ``seconds`` is negative or not finite.
    """
    if not math.isfinite(seconds * 1000) or seconds < 0:
        raise ValueError(f"cannot format duration {seconds!r}: must be a finite number >= 0")
    total_ms = round(seconds * 1000)
    if total_ms == 0:
        return "0s"
    parts: list[str] = []
    for unit, size_ms in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        count, total_ms = divmod(total_ms, size_ms)
        if count:
            parts.append(f"{count}{unit}")
    if total_ms:
        parts.append(f"{total_ms}ms")
    return "".join(parts)


def format_elapsed(seconds: float) -> str:
    """Deprecated: use :func:`format_span` (the one display style); goes after one release.

    Warns (``DeprecationWarning``) and returns the old compact style: ``850ms``, ``12.3s``,
    ``4m05s`` (whole seconds truncated), ``2h03m``; a negative ``seconds`` shows as ``0ms``.
    """
    warnings.warn(
        "cyclone_flow.durations.format_elapsed is deprecated: use format_span",
        DeprecationWarning,
        stacklevel=2,
    )
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_span(seconds: float) -> str:
    """A time that passed, in the one style of the CLI and the dashboard (a step's run, a
    run's, a transaction's age, the health advice): ``850 ms``, ``12.3 s``, ``4 min 05 s``
    (whole seconds truncated), ``2 h 03 min``, ``3 d 04 h``; a negative ``seconds`` shows
    as ``0 ms``."""
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{whole // 86400} d {whole % 86400 // 3600:02d} h"

"""The cron expressions cyclone-flow accepts: one check for lint (E050) and the API
(``schedule add``/``sync``, :class:`cyclone_flow.schedules.Ticks`), so both accept the
same expressions.

Accepted: five fields ``minute hour day-of-month month day-of-week``, or six with the
seconds last (croniter's order), or one of ``@hourly``, ``@daily``, ``@weekly``,
``@monthly``, ``@yearly``. Each field is ``*``, a number, a range ``a-b``, one of these
with a step (``*/15``, ``1-30/5``, ``5/10``: from 5 on), or a comma list of them; months
and weekdays may be given by name (``jan``, ``mon-fri``). croniter's extensions are
refused: ``R`` (a random value, drawn again at every parse, so the ticks move),
``H`` (hashed), ``L``, ``W``, ``#``, ``?``, a seventh (year) field (a schedule whose last
year passed would never tick again), other macros (``@reboot``, ``@midnight``).

Examples
--------
>>> cron_problem("*/5 * * * *") is None
True
>>> cron_problem("0 0 1 1 * 0 2027")  # doctest: +ELLIPSIS
"has 7 fields (a year field is not supported): ..."
"""

from __future__ import annotations

import re

from croniter import croniter

__all__ = ["MACROS", "MAX_CRON_CHARS", "cron_problem"]

MACROS = ("@hourly", "@daily", "@weekly", "@monthly", "@yearly")
"""The macros accepted, as the docs list them."""

MAX_CRON_CHARS = 1000
"""Longest expression looked at (a list of every minute is under 200 characters)."""

_FIELDS = ("minute", "hour", "day of month", "month", "day of week", "second")
_MONTHS = "jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec"
_DAYS = "sun|mon|tue|wed|thu|fri|sat"


def _field_re(names: str | None) -> re.Pattern[str]:
    value = r"[0-9]{1,2}" if names is None else rf"(?:[0-9]{{1,2}}|{names})"
    item = rf"(?:\*|{value}(?:-{value})?)(?:/[0-9]{{1,2}})?"
    return re.compile(rf"{item}(?:,{item})*", re.IGNORECASE)


_PLAIN = _field_re(None)
_FIELD_RES = (_PLAIN, _PLAIN, _PLAIN, _field_re(_MONTHS), _field_re(_DAYS), _PLAIN)
_SEPARATORS = re.compile(r"[ \t]+")


def cron_problem(expr: object) -> str | None:
    """Why ``expr`` is not a cron expression cyclone-flow accepts (see the module
    docstring), or None when it is one. Values out of range (``61 * * * *``) are
    croniter's to find. An expression that matches no date (``0 0 31 2 *``) passes here:
    it is refused when its first tick is looked for. Never raises."""
    if not isinstance(expr, str):
        return "must be a string"
    if len(expr) > MAX_CRON_CHARS:
        return f"is longer than {MAX_CRON_CHARS} characters"
    text = expr.strip(" \t")
    if not text:
        return "is empty"
    if text.startswith("@"):
        if text in MACROS:
            return None
        if text == "@reboot":
            return "@reboot is not supported: a schedule ticks at times (" + _macros() + ")"
        return f"the macro {text!r} is not supported ({_macros()})"
    if any(ch.isspace() and ch not in " \t" for ch in text):
        return "its fields must be separated by spaces"
    fields = _SEPARATORS.split(text)
    if len(fields) not in (5, 6):
        extra = " (a year field is not supported)" if len(fields) == 7 else ""
        count = f"{len(fields)} field{'s' if len(fields) > 1 else ''}"
        return f"has {count}{extra}: 5 'minute hour day month weekday', or 6 with the seconds last"
    for i, (field, pattern) in enumerate(zip(fields, _FIELD_RES, strict=False)):
        if not pattern.fullmatch(field):
            return (
                f"field {i + 1} ({_FIELDS[i]}) {field!r} is not supported: use numbers, "
                "names, '*', ranges 'a-b', steps '/n' and lists ',' (croniter's R, H, L, "
                "W, # and ? are not supported)"
            )
    try:
        croniter(text)
    except Exception as exc:  # CroniterBadCronError and kin: a value out of range, ...
        return f"is not valid ({exc})"
    return None


def _macros() -> str:
    return ", ".join(MACROS)

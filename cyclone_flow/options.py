"""Per-submission options of ``submit``/``enqueue`` (seeds: Queues and Priority, Unique Jobs,
Sequences; delayed runs), validated before anything is written, and the synthetic
one-node flow of a standalone job. Pure: no database.

Precedence of ``queue`` and ``priority``: a node's own ``queue:``/``priority:`` in the flow
file wins, then the submission's ``queue=``/``priority=``, then the flow's ``defaults:``,
then ``default`` / 0. A lower priority number is claimed first (as in River and Oban).
The override is applied when the run's steps are inserted from the definition's plan
(``step_insert_plan``); it covers the submitted flow's nodes (and the items of its fan-out
nodes), not the runs its ``child`` nodes start, which use their own flow's queues.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

from cyclone_flow.durations import (
    MAX_FLOW_DURATION_S,
    MIN_FLOW_DURATION_S,
    DurationError,
    check_seconds,
    parse_duration,
)
from cyclone_flow.errors import SubmitOptionError, shown
from cyclone_flow.flowfile.build import build_flow, document_digest
from cyclone_flow.flowfile.model import Flow
from cyclone_flow.names import QUEUE_NAME_RULE, is_queue_name
from cyclone_flow.states import RunState
from cyclone_flow.text import describe_unstorable

__all__ = [
    "JOB_NODE",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "JobOptions",
    "RunOptions",
    "SubmitOptions",
    "job_flow",
    "run_options",
    "validate_callable",
]

MIN_PRIORITY = -32768
MAX_PRIORITY = 32767
MAX_KEY_CHARS = 1000
MAX_KEY_BYTES = 2000
"""``unique_key`` and ``sequence`` are also at most this many UTF-8 bytes: a btree index
entry holds at most 2704 bytes."""
MAX_CALL_CHARS = 1000
"""The longest callable path (``package.module:function``) of a job."""
MAX_MULTIPLIER = 1000
"""The largest ``retry.backoff.multiplier`` (as in flow.schema.json)."""
JOB_NODE = "job"
"""The node name of a standalone job's one-node flow."""

_CALL_RE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
    r"(\.[A-Za-z_][A-Za-z0-9_]*)*$"
)
_RUN_STATES = frozenset(s.value for s in RunState)


@dataclass(frozen=True)
class RunOptions:
    """Validated options of one submission (build with :func:`run_options`).

    - ``queue`` / ``priority``: override every node that does not set its own.
    - ``run_at`` (aware datetime) or ``delay_s`` (seconds): when the run's steps become
      claimable; the database computes ``now() + delay``.
    - ``unique_key``, ``unique_window_s`` (seconds), ``unique_states`` (run states the key
      covers; always includes ``running``).
    - ``sequence``: runs sharing it execute one at a time in submission order.
    - ``schedule_id`` / ``scheduled_for``: set by the schedule scanner only.
    - ``owner``: the client id whose worker alone claims the run's steps while its
      heartbeat row is live (an isolated run: ``Client.submit(isolated=True)``).
    - ``revision``: the deployed revision of the flow a submission by name runs (recorded
      on the run; None: a file or a ``Flow``), set by the Client, never by a caller.
    """

    queue: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    delay_s: float | None = None
    unique_key: str | None = None
    unique_window_s: float | None = None
    unique_states: tuple[str, ...] | None = None
    sequence: str | None = None
    schedule_id: int | None = None
    scheduled_for: datetime | None = None
    owner: str | None = None
    revision: int | None = None

    @property
    def delayed(self) -> bool:
        """True when the run's steps wait for ``run_at`` or ``delay_s``."""
        return self.run_at is not None or bool(self.delay_s)


_SECONDS_PROBLEMS = {
    "type": "must be a number of seconds, a timedelta or a duration like '30s'",
    "long": "must be at most 366 days",
}


def _seconds(option: str, value: Any, *, allow_zero: bool) -> float:
    """A duration option (number of seconds, ``timedelta`` or ``'30s'``) as seconds: 0 (when
    ``allow_zero``) or 1 ms to 366 days; raise :class:`SubmitOptionError`."""
    seconds: object = value
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise SubmitOptionError(option, value, str(exc)) from None
    try:
        return check_seconds(
            seconds, max_s=MAX_FLOW_DURATION_S, allow_zero=allow_zero, min_s=MIN_FLOW_DURATION_S
        )
    except DurationError as exc:
        if exc.kind == "sign":
            problem = (
                "must be a finite number of seconds >= 0"
                if allow_zero
                else "must be a positive number of seconds"
            )
        elif exc.kind == "short":
            problem = "must be 0 or at least 1ms" if allow_zero else "must be at least 1ms"
        else:
            problem = _SECONDS_PROBLEMS[exc.kind]
        raise SubmitOptionError(option, value, problem) from None


def _key(option: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_KEY_CHARS:
        raise SubmitOptionError(
            option, value, f"must be a non-empty string of at most {MAX_KEY_CHARS} characters"
        )
    reason = describe_unstorable(value)
    if reason is not None:
        raise SubmitOptionError(option, value, f"must not contain {reason}")
    if len(value.encode("utf-8")) > MAX_KEY_BYTES:
        raise SubmitOptionError(
            option, value, f"must be at most {MAX_KEY_BYTES} bytes when encoded as UTF-8"
        )
    return value


def validate_queue_option(value: Any, option: str = "queue") -> str:
    """Return ``value`` when it is a valid queue name; raise :class:`SubmitOptionError`."""
    if not is_queue_name(value):
        raise SubmitOptionError(option, value, f"a queue name is {QUEUE_NAME_RULE}")
    return str(value)


def run_options(
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_at: datetime | None = None,
    delay: float | timedelta | str | None = None,
    unique_key: str | None = None,
    unique_window: float | timedelta | str | None = None,
    unique_states: Iterable[str] | None = None,
    sequence: str | None = None,
) -> RunOptions:
    """Validate the keyword options of one submission.

    Parameters
    ----------
    queue
        Queue of every node that does not set its own.
    priority
        Priority (-32768..32767, lower is claimed first) of every node that does not set
        its own.
    run_at
        Aware datetime at which the root steps become claimable; a naive datetime is
        refused (its time zone would be a guess).
    delay
        Seconds (number, ``timedelta`` or ``'30s'``), at most 366 days, added to the
        database's ``now()``. Exclusive with ``run_at``.
    unique_key, unique_window, unique_states
        While a run with this key is in one of ``unique_states`` (default: ``running``;
        must include it) and, with ``unique_window`` seconds, was submitted in the same
        window bucket (``floor(epoch / window)``), a new submission with the key returns
        that run's id and writes nothing.
    sequence
        Runs sharing it execute one at a time, in submission order.

    Raises
    ------
    SubmitOptionError
        For the first invalid option.
    """
    if queue is not None:
        validate_queue_option(queue)
    if priority is not None and (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not MIN_PRIORITY <= priority <= MAX_PRIORITY
    ):
        raise SubmitOptionError(
            "priority", priority, f"must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}"
        )
    if run_at is not None and delay is not None:
        raise SubmitOptionError("run_at", run_at, "give run_at or delay, not both")
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise SubmitOptionError("run_at", run_at, "must be a datetime")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise SubmitOptionError(
                "run_at",
                run_at,
                "a naive datetime is ambiguous: give it a time zone (e.g. tzinfo=timezone.utc)",
            )
    delay_s = None if delay is None else _seconds("delay", delay, allow_zero=True)
    key = None if unique_key is None else _key("unique_key", unique_key)
    window = None
    if unique_window is not None:
        if key is None:
            raise SubmitOptionError("unique_window", unique_window, "needs a unique_key")
        window = _seconds("unique_window", unique_window, allow_zero=False)
    states = None
    if unique_states is not None:
        if key is None:
            raise SubmitOptionError("unique_states", unique_states, "needs a unique_key")
        if isinstance(unique_states, str):
            raise SubmitOptionError(
                "unique_states", unique_states, "must be a collection of run states"
            )
        given = list(unique_states)
        bad = [s for s in given if s not in _RUN_STATES]
        if bad:
            raise SubmitOptionError(
                "unique_states",
                unique_states,
                f"unknown run state {bad[0]!r} (states: {', '.join(sorted(_RUN_STATES))})",
            )
        if RunState.RUNNING not in given:
            raise SubmitOptionError(
                "unique_states",
                unique_states,
                "must include 'running': a new run is running, so a key it does not hold "
                "while running could never be held",
            )
        states = tuple(sorted({str(s) for s in given}))
    seq = None if sequence is None else _key("sequence", sequence)
    return RunOptions(
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay_s=delay_s,
        unique_key=key,
        unique_window_s=window,
        unique_states=states,
        sequence=seq,
    )


def validate_callable(call: Any) -> str:
    """Return ``call`` when it is ``package.module:function``; raise SubmitOptionError."""
    if not isinstance(call, str) or len(call) > MAX_CALL_CHARS or not _CALL_RE.fullmatch(call):
        raise SubmitOptionError(
            "callable",
            call,
            f"must be a dotted path 'package.module:function' of at most {MAX_CALL_CHARS} "
            "characters",
        )
    return call


def job_flow(
    call: str,
    *,
    retry: int | Mapping[str, Any] | None = None,
    timeout: float | timedelta | str | None = None,
) -> Flow:
    """The synthetic one-node flow of a standalone job (``Client.enqueue``): its name is the
    callable, its only node ``job`` calls it with the run input (the job's ``args``). The
    definition is content-addressed like a flow file's, so status, retry and cancel work
    on jobs unchanged.

    ``retry``: ``max_attempts`` as an int, or a mapping like a flow file's ``retry:``
    (``{"max_attempts": 5, "backoff": {"initial": "1s", "max": "1m"}}``). ``timeout``:
    seconds, timedelta or a duration string.

    Raises SubmitOptionError for a bad callable, retry or timeout.
    """
    validate_callable(call)
    node: dict[str, Any] = {"call": call}
    if retry is not None:
        node["retry"] = _retry_doc(retry)
    if timeout is not None:
        node["timeout"] = _seconds("timeout", timeout, allow_zero=False)
    document = {"name": call, "kind": "job", "nodes": {JOB_NODE: node}}
    try:
        flow = build_flow(document)
    except (KeyError, TypeError, ValueError) as exc:
        raise SubmitOptionError("retry", retry, str(exc)) from None
    assert flow.digest == document_digest(document)
    return flow


def _retry_doc(retry: int | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(retry, int) and not isinstance(retry, bool):
        retry = {"max_attempts": retry}
    if not isinstance(retry, Mapping):
        raise SubmitOptionError("retry", retry, "must be max_attempts (int) or a mapping")
    unknown = set(retry) - {"max_attempts", "backoff"}
    if unknown:
        raise SubmitOptionError("retry", retry, f"unknown key {sorted(unknown)[0]!r}")
    out: dict[str, Any] = {}
    if "max_attempts" in retry:
        attempts = retry["max_attempts"]
        if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 1000:
            raise SubmitOptionError("retry", retry, "max_attempts must be an integer 1..1000")
        out["max_attempts"] = attempts
    if "backoff" in retry:
        backoff = retry["backoff"]
        if not isinstance(backoff, Mapping):
            raise SubmitOptionError("retry", retry, "backoff must be a mapping")
        doc: dict[str, Any] = {}
        for key, value in backoff.items():
            if key in ("initial", "max"):
                doc[key] = _seconds(f"retry.backoff.{key}", value, allow_zero=True)
            elif (key == "multiplier" and _number(value) and 1 <= value <= MAX_MULTIPLIER) or (
                key == "jitter" and _number(value) and 0 <= value <= 1
            ):
                doc[key] = float(value)
            else:
                raise SubmitOptionError(
                    "retry",
                    retry,
                    f"invalid backoff {key}: {shown(value)} (initial and max: durations; "
                    f"multiplier: a number from 1 to {MAX_MULTIPLIER}; jitter: from 0 to 1)",
                )
        if doc.get("initial", 0) > doc.get("max", math.inf):
            raise SubmitOptionError("retry", retry, "backoff initial is above max")
        out["backoff"] = doc
    return out


def _number(value: Any) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


class SubmitOptions(TypedDict, total=False):
    """Keyword options of every submission (``submit``, ``enqueue``, ``submit_tx``,
    ``enqueue_tx``, ``ctx.submit_completion``, ``ctx.enqueue_completion``); see
    :func:`run_options`."""

    queue: str | None
    priority: int | None
    run_at: datetime | None
    delay: float | timedelta | str | None
    unique_key: str | None
    unique_window: float | timedelta | str | None
    unique_states: Iterable[str] | None
    sequence: str | None


class JobOptions(SubmitOptions, total=False):
    """:class:`SubmitOptions` plus the standalone job's ``retry`` (max_attempts or a
    ``retry:`` mapping) and ``timeout`` (seconds, timedelta or ``'30s'``)."""

    retry: int | Mapping[str, Any] | None
    timeout: float | timedelta | str | None

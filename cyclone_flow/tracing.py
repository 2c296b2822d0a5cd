"""OpenTelemetry traces of submissions and step attempts (the ``otel`` extra;
docs/observability.md).

The library depends only on ``opentelemetry-api``, imported here and nowhere else, and
only when it is installed: without it every function of this module is a no-op that
returns at once (:data:`ENABLED` False), and nothing is stored. The application configures
the SDK (a ``TracerProvider`` with its exporters); until it does, no span is made either
(the API's would record nothing), and only a trace context already current (e.g. one a
web framework's middleware extracted) is stored with a run.

One run is one trace across processes. The submitting call's span
(:func:`submit_span`) is current while the run is inserted, and its W3C trace context
(:func:`current_traceparent`, the ``traceparent`` header value) is stored on the run and on
each of its step rows (migration 0012; child runs and fan-out items copy it). A worker
gets it back with the claimed step and opens one span per attempt as its child
(:func:`attempt`): ``cyclone.step``, with the children ``cyclone.handler`` (current while the
handler runs, so its own spans and the runs it submits with ``ctx.submit_completion``
nest under it) and ``cyclone.commit``; the group commit has a span of its own
(:func:`group_commit_span`) linked to the attempts it commits.

Attributes: ``cyclone.run_id``, ``cyclone.node``, ``cyclone.attempt``, ``cyclone.queue``,
``cyclone.flow``, ``cyclone.step_id``, ``cyclone.outcome`` and ``cyclone.error_kind``
(see :data:`ATTRIBUTES`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

try:  # the optional extra: absent, every function here is a no-op
    from opentelemetry import context as _otel_context
    from opentelemetry import trace as _otel_trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised where the extra is not installed
    _otel_trace = None  # type: ignore[assignment]
    _otel_context = None  # type: ignore[assignment]
    TraceContextTextMapPropagator = None  # type: ignore[assignment,misc]

__all__ = [
    "ATTRIBUTES",
    "ENABLED",
    "TRACER_NAME",
    "Attempt",
    "SubmitSpan",
    "attempt",
    "current_traceparent",
    "group_commit_span",
    "submit_span",
]

ENABLED = _otel_trace is not None
"""Whether ``opentelemetry-api`` is installed (the ``otel`` extra)."""

TRACER_NAME = "cyclone_flow"
"""The instrumentation scope of every span of the library."""

ATTRIBUTES = (
    "cyclone.run_id",
    "cyclone.node",
    "cyclone.attempt",
    "cyclone.queue",
    "cyclone.flow",
    "cyclone.step_id",
    "cyclone.outcome",
    "cyclone.error_kind",
)
"""The span attributes the library sets (``cyclone.outcome``: ``completed``,
``retry_scheduled``, ``discarded``, ``cancelled``, ``stale`` or ``lost``; ``cyclone.runs``:
the number of runs of a bulk submit; ``cyclone.batch_size``: the steps of a group
commit)."""

_PROPAGATOR = TraceContextTextMapPropagator() if ENABLED else None
_tracer: Any = None


def _configured() -> bool:
    """Whether the application set a tracer provider (an SDK): until it does, the API's
    proxy would only make spans that record nothing, so none is made (an attempt then
    costs two function calls, as without the extra)."""
    provider = _otel_trace.get_tracer_provider()
    return not isinstance(
        provider, (_otel_trace.ProxyTracerProvider, _otel_trace.NoOpTracerProvider)
    )


def _get_tracer() -> Any:
    """The library's tracer (the API's proxy until the application sets a provider)."""
    global _tracer
    if _tracer is None:
        _tracer = _otel_trace.get_tracer(TRACER_NAME)
    return _tracer


class TracedStep(Protocol):
    """What an attempt's span reads of a claimed step
    (:class:`cyclone_flow.db.rows.ClaimedStep`)."""

    @property
    def id(self) -> int: ...
    @property
    def run_id(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def parent_node(self) -> str | None: ...
    @property
    def traceparent(self) -> str | None: ...
    @property
    def flow_name(self) -> str | None: ...


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the span current on this thread (``00-<trace id>-<span
    id>-<flags>``), or None when there is none (or the extra is not installed)."""
    if _otel_trace is None:
        return None
    ctx = _otel_trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _parent(traceparent: str | None) -> Any:
    """The OpenTelemetry context of a stored ``traceparent`` (None: a new trace)."""
    if traceparent is None or _PROPAGATOR is None:
        return None
    return _PROPAGATOR.extract({"traceparent": traceparent})


def _record_error(span: Any, error: BaseException | str, error_kind: str | None) -> None:
    if error_kind is not None:
        span.set_attribute("cyclone.error_kind", error_kind)
    if isinstance(error, BaseException):
        span.record_exception(error)
        text = f"{type(error).__name__}: {error}"
    else:
        text = error
    span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR, text))


# -- submit --------------------------------------------------------------------------------


class SubmitSpan:
    """The ``cyclone.submit`` span of one submission, current while it inserts (so
    :func:`current_traceparent` inside it names this span). :meth:`run_id` records the run
    inserted; a no-op without the extra."""

    __slots__ = ("_cm", "_span", "flow", "runs")

    def __init__(self, flow: str, runs: int | None) -> None:
        self.flow = flow
        self.runs = runs
        self._cm: Any = None
        self._span: Any = None

    def __enter__(self) -> SubmitSpan:
        if _otel_trace is None or not _configured():
            return self
        attributes: dict[str, Any] = {"cyclone.flow": self.flow}
        if self.runs is not None:
            attributes["cyclone.runs"] = self.runs
        self._cm = _get_tracer().start_as_current_span(
            f"cyclone.submit {self.flow}",
            kind=_otel_trace.SpanKind.PRODUCER,
            attributes=attributes,
        )
        self._span = self._cm.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._cm is not None:
            self._cm.__exit__(*exc)

    def run_id(self, run_id: str) -> None:
        """Record the inserted run's id on the span."""
        if self._span is not None:
            self._span.set_attribute("cyclone.run_id", str(run_id))


_NO_SUBMIT = SubmitSpan("", None)  # without the extra: entered, it does nothing


def submit_span(flow: str, runs: int | None = None) -> SubmitSpan:
    """A :class:`SubmitSpan` for a submission of ``flow`` (``runs``: how many runs, for a
    bulk submit), to use as a context manager (without the extra: one shared no-op)."""
    if _otel_trace is None:
        return _NO_SUBMIT
    return SubmitSpan(flow, runs)


# -- one step attempt ----------------------------------------------------------------------


class Attempt:
    """The spans of one step attempt: ``cyclone.step`` from the moment the worker takes the
    claimed step to its settlement, the child ``cyclone.handler`` (:meth:`handler`) and
    the child ``cyclone.commit`` (:meth:`commit`, ended by :meth:`finish`). The first
    :meth:`finish` ends them; later calls do nothing. Thread-safe enough for the worker:
    the handler's thread opens it, the completer thread may finish it."""

    __slots__ = ("_commit", "_context", "_label", "_span")

    def __init__(self, step: TracedStep) -> None:
        self._label = step.parent_node or step.node  # a fan-out item: its node's name
        attributes: dict[str, Any] = {
            "cyclone.run_id": step.run_id,
            "cyclone.node": step.node,
            "cyclone.attempt": step.attempt,
            "cyclone.queue": step.queue,
            "cyclone.step_id": step.id,
        }
        if step.flow_name is not None:
            attributes["cyclone.flow"] = step.flow_name
        self._span = _get_tracer().start_span(
            f"cyclone.step {self._label}",
            context=_parent(step.traceparent),
            kind=_otel_trace.SpanKind.CONSUMER,
            attributes=attributes,
        )
        self._context = _otel_trace.set_span_in_context(self._span)
        self._commit: Any = None

    @contextlib.contextmanager
    def handler(self) -> Iterator[None]:
        """The ``cyclone.handler`` span, current on this thread while the block runs; an
        exception leaving the block is recorded on it (its cause, when it wraps one)."""
        span = _get_tracer().start_span(f"cyclone.handler {self._label}", context=self._context)
        token = _otel_context.attach(_otel_trace.set_span_in_context(span, self._context))
        try:
            yield
        except BaseException as exc:
            _record_error(span, exc.__cause__ or exc, None)
            raise
        finally:
            _otel_context.detach(token)
            span.end()

    def commit(self) -> None:
        """Start the ``cyclone.commit`` span (the completion handed to its transaction)."""
        if self._commit is None and self._span is not None:
            self._commit = _get_tracer().start_span(
                f"cyclone.commit {self._label}", context=self._context
            )

    def link(self) -> Any:
        """The attempt span's context (what a group commit links to)."""
        return None if self._span is None else self._span.get_span_context()

    def finish(
        self,
        outcome: str | None = None,
        *,
        error: BaseException | str | None = None,
        error_kind: str | None = None,
    ) -> None:
        """End the commit span (when started) and the attempt span, with ``outcome``
        (``cyclone.outcome``) and the ``error`` / ``error_kind`` of a failed attempt."""
        span, commit = self._span, self._commit
        if span is None:
            return
        self._span = self._commit = None
        if outcome is not None:
            span.set_attribute("cyclone.outcome", outcome)
        if error is not None:
            _record_error(span, error, error_kind)
        elif error_kind is not None:
            span.set_attribute("cyclone.error_kind", error_kind)
        if commit is not None:
            commit.end()
        span.end()


_NO_CONTEXT: contextlib.nullcontext[None] = contextlib.nullcontext()


class _NoAttempt:
    """The attempt of a process without the extra: every method a no-op."""

    __slots__ = ()

    def handler(self) -> contextlib.nullcontext[None]:
        return _NO_CONTEXT

    def commit(self) -> None:
        return None

    def link(self) -> Any:
        return None

    def finish(
        self,
        outcome: str | None = None,
        *,
        error: BaseException | str | None = None,
        error_kind: str | None = None,
    ) -> None:
        return None


NO_ATTEMPT: Any = _NoAttempt()
"""The one no-op attempt (:func:`attempt` without the extra)."""


def attempt(step: TracedStep) -> Attempt:
    """The spans of an attempt of the claimed ``step``, children of its stored trace
    context (a new trace when it has none); a no-op object without the extra or before
    the application set a tracer provider."""
    if _otel_trace is None or not _configured():
        return NO_ATTEMPT  # type: ignore[no-any-return]
    return Attempt(step)


@contextlib.contextmanager
def group_commit_span(attempts: Sequence[Any]) -> Iterator[None]:
    """The ``cyclone.group_commit`` span around one transaction of the group commit, linked
    to the attempt spans of its steps (``attempts``: their :class:`Attempt` objects)."""
    if _otel_trace is None or not _configured():
        yield
        return
    links = [_otel_trace.Link(c) for c in (a.link() for a in attempts) if c is not None]
    with _get_tracer().start_as_current_span(
        "cyclone.group_commit",
        kind=_otel_trace.SpanKind.INTERNAL,
        links=links,
        attributes={"cyclone.batch_size": len(attempts)},
    ):
        yield

"""OpenTelemetry in tests: one SDK tracer provider for the test process with an in-memory
exporter (switched on only while a test uses :func:`spans`), and the spans a worker
process wrote through ``helpers/otel_site/sitecustomize.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes

OTEL_SITE = Path(__file__).with_name("otel_site")
"""Put on a worker process's ``PYTHONPATH`` (with ``OTEL_TEST_SPANS_FILE``) to trace it."""


class _Switch(Sampler):
    """Samples (parent-based) only while a test records spans; the other tests of the
    process get unsampled spans that nothing exports."""

    def __init__(self) -> None:
        self.on = False
        self.inner = ParentBased(ALWAYS_ON)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        if not self.on:
            return SamplingResult(Decision.DROP)
        return self.inner.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return "test switch"


_SWITCH = _Switch()
_EXPORTER = InMemorySpanExporter()
_PROVIDER: TracerProvider | None = None


def recording() -> Iterator[InMemorySpanExporter]:
    """Record this process's spans for the block (the fixture ``spans``), cleared first."""
    global _PROVIDER
    if _PROVIDER is None:
        _PROVIDER = TracerProvider(sampler=_SWITCH)
        _PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(_PROVIDER)
    _EXPORTER.clear()
    _SWITCH.on = True
    try:
        yield _EXPORTER
    finally:
        _SWITCH.on = False
        _EXPORTER.clear()


@dataclass(frozen=True)
class SpanRecord:
    """A finished span, from this process or a worker process's file."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    status: str
    events: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)


def from_memory(exporter: InMemorySpanExporter) -> list[SpanRecord]:
    """The spans this process finished so far."""
    out = []
    for s in exporter.get_finished_spans():
        ctx = s.get_span_context()
        assert ctx is not None
        out.append(
            SpanRecord(
                name=s.name,
                trace_id=f"{ctx.trace_id:032x}",
                span_id=f"{ctx.span_id:016x}",
                parent_id=None if s.parent is None else f"{s.parent.span_id:016x}",
                attributes=dict(s.attributes or {}),
                status=s.status.status_code.name,
                events=[e.name for e in s.events],
                links=[f"{link.context.span_id:016x}" for link in s.links],
            )
        )
    return out


def read_spans(path: Path) -> list[SpanRecord]:
    """The spans a worker process wrote to ``path`` (none when it wrote nothing yet)."""
    if not path.exists():
        return []
    return [
        SpanRecord(**json.loads(line))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]

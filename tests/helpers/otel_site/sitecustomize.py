"""Configures the OpenTelemetry SDK in a test's worker process at interpreter start (the
way ``opentelemetry-instrument`` does, through ``sitecustomize``): put this folder on
``PYTHONPATH`` and name a file in ``OTEL_TEST_SPANS_FILE``; every span that ends is
appended to it as one JSON line (read back with ``helpers.otel.read_spans``)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence

_PATH = os.environ.get("OTEL_TEST_SPANS_FILE")

if _PATH:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class _JsonLines(SpanExporter):
        def __init__(self, path: str) -> None:
            self.path = path
            self.lock = threading.Lock()

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            lines = []
            for s in spans:
                ctx = s.get_span_context()
                lines.append(
                    json.dumps(
                        {
                            "name": s.name,
                            "trace_id": f"{ctx.trace_id:032x}",
                            "span_id": f"{ctx.span_id:016x}",
                            "parent_id": None if s.parent is None else f"{s.parent.span_id:016x}",
                            "attributes": dict(s.attributes or {}),
                            "status": s.status.status_code.name,
                            "events": [e.name for e in s.events],
                            "links": [f"{link.context.span_id:016x}" for link in s.links],
                        }
                    )
                )
            with self.lock, open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
            return SpanExportResult.SUCCESS

    _provider = TracerProvider()
    _provider.add_span_processor(SimpleSpanProcessor(_JsonLines(_PATH)))
    trace.set_tracer_provider(_provider)

"""The OpenTelemetry SDK behind ``gateway/observe/otel.py``: imported only when tracing is on.

    tracer = OtelTracer.start(OtelConfig(endpoint="http://collector:4318"))
    span = tracer.start_request({"traceparent": "00-4bf9...-00f0...-01"})

One ``TracerProvider`` per worker process (made in the lifespan, after the
fork), not the global one: nothing else in the process is traced through it.
Spans are batched by a ``BatchSpanProcessor`` and sent by the OTLP/HTTP
protobuf exporter from its own thread; ``aclose`` flushes the last batch.
Sampling is parent-based: a client's traceparent decides, else
``sample_ratio`` of new traces.

Attributes are ids, names and numbers only: team, pool, model, status,
attempts, tokens and cost; never a key or the prompt.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from core.otel_config import OtelConfig
from gateway.observe.tracing import TraceContext
from gateway.pipeline.outcome import Outcome

_PROPAGATOR = TraceContextTextMapPropagator()


class OtelSpan:
    """One SDK span, plus (for a request's span) its children, to end them all at the finish."""

    __slots__ = ("_span", "_tracer", "_children")

    def __init__(self, span: trace.Span, tracer: trace.Tracer) -> None:
        self._span, self._tracer = span, tracer
        self._children: list[OtelSpan] = []

    @property
    def trace_id(self) -> str:
        return f"{self._span.get_span_context().trace_id:032x}"

    def child(self, name: str, model: str | None = None) -> OtelSpan:
        attributes = {"routegate.model": model} if model is not None else None
        span = self._tracer.start_span(name, trace.set_span_in_context(self._span),
                                       attributes=attributes)
        child = OtelSpan(span, self._tracer)
        self._children.append(child)
        return child

    def end(self, outcome: str | None = None, failed: bool = False) -> None:
        if outcome is not None:
            self._span.set_attribute("routegate.outcome", outcome)
        if failed:
            self._span.set_status(Status(StatusCode.ERROR, outcome))
        self._span.end()

    def upstream_headers(self, trace_context: TraceContext, request_id: str) -> bytes:
        ctx = self._span.get_span_context()
        ours = dataclasses.replace(trace_context, trace_id=f"{ctx.trace_id:032x}",
                                   span_id=f"{ctx.span_id:016x}", flags=f"{ctx.trace_flags:02x}")
        return ours.upstream_headers(request_id)

    def finish(self, o: Outcome) -> None:
        for child in self._children:
            if child._span.is_recording():    # left open by an exception: the stage failed
                child.end("unfinished", failed=True)
        span = self._span
        span.set_attributes(_request_attributes(o))
        if o.status >= 500:
            span.set_status(Status(StatusCode.ERROR, o.error_code))
        span.end()


def _request_attributes(o: Outcome) -> dict[str, str | int | float]:
    values: dict[str, str | int | float | None] = {
        "routegate.request_id": o.request_id,
        "routegate.team": o.team,
        "routegate.pool": o.pool,
        "routegate.model": o.model,
        "routegate.reason": o.reason,
        "routegate.stream": int(o.stream),
        "http.response.status_code": o.status,
        "error.type": o.error_code,
        "routegate.attempts": o.attempts,
        "gen_ai.usage.input_tokens": o.prompt_tokens,
        "gen_ai.usage.output_tokens": o.completion_tokens,
        "routegate.cost_usd": o.cost_usd,
    }
    return {k: v for k, v in values.items() if v is not None}


class OtelTracer:
    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("routegate")

    @classmethod
    def start(cls, config: OtelConfig) -> OtelTracer:
        provider = TracerProvider(
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
            resource=Resource.create({"service.name": config.service_name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=config.endpoint)))
        return cls(provider)

    def start_request(self, headers: Mapping[str, str]) -> OtelSpan:
        parent = _PROPAGATOR.extract(headers) if "traceparent" in headers else None
        span = self._tracer.start_span("chat.completion", parent, kind=SpanKind.SERVER)
        return OtelSpan(span, self._tracer)

    async def aclose(self) -> None:
        # The exporter is blocking HTTP: flush and stop it off the event loop.
        await asyncio.to_thread(self._provider.shutdown)

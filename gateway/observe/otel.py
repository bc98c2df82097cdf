"""Optional OpenTelemetry traces: one span per request, children per stage.

    tracer = start_tracer(config.otel)        # in the lifespan: NOOP unless otel.endpoint
    span = tracer.start_request(headers)      # chat.completion, continuing the client's traceparent
    stage = span.child("classify"); ...; stage.end()
    attempt = span.child("upstream.attempt", model.name)
    headers = attempt.upstream_headers(chat.trace, request_id)   # traceparent: the attempt's
    attempt.end("ok")
    span.finish(outcome)                      # attributes from the Outcome; ends what is open
    await tracer.aclose()                     # flushes the last batch

Off by default, and then free: ``NOOP`` is one module-level object whose
methods return itself or nothing, so the request path makes a few empty
method calls and allocates nothing. The SDK lives in ``gateway/observe/otel_sdk.py``,
imported only when ``otel.endpoint`` is set; it is the optional extra
``routegate[otel]``, and a config that asks for it without it installed
stops the start-up with the command to run.

Spans are explicit ``child``/``end`` pairs rather than context managers, so
the off path has no ``with`` blocks; a stage that raised is ended (as an
error) by its request's ``finish``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from core.otel_config import OtelConfig
from gateway.observe.tracing import TraceContext

if TYPE_CHECKING:
    from gateway.pipeline.outcome import Outcome

INSTALL_HINT = "pip install 'routegate[otel]'"


class Span(Protocol):
    @property
    def trace_id(self) -> str | None:
        """The W3C trace id (32 hex digits), or None when not tracing."""
        ...

    def child(self, name: str, model: str | None = None) -> Span: ...

    def end(self, outcome: str | None = None, failed: bool = False) -> None: ...

    def upstream_headers(self, trace: TraceContext, request_id: str) -> bytes:
        """``trace.upstream_headers``, with this span as the upstream's parent."""
        ...

    def finish(self, o: Outcome) -> None:
        """The request's span: its attributes from ``o``, then it and any open child end."""
        ...


class Tracer(Protocol):
    def start_request(self, headers: Mapping[str, str]) -> Span: ...

    async def aclose(self) -> None: ...


class _NoSpan:
    """Every span when tracing is off: one object, nothing recorded."""

    __slots__ = ()
    trace_id = None

    def child(self, name: str, model: str | None = None) -> _NoSpan:
        return self

    def end(self, outcome: str | None = None, failed: bool = False) -> None:
        pass

    def upstream_headers(self, trace: TraceContext, request_id: str) -> bytes:
        return trace.upstream_headers(request_id)

    def finish(self, o: Outcome) -> None:
        pass


class _NoTracer:
    __slots__ = ()

    def start_request(self, headers: Mapping[str, str]) -> _NoSpan:
        return NO_SPAN

    async def aclose(self) -> None:
        pass


NO_SPAN = _NoSpan()
NOOP = _NoTracer()


def start_tracer(config: OtelConfig) -> Tracer:
    """NOOP without an endpoint; else the SDK's tracer with a batching OTLP/HTTP exporter.

    Raises RuntimeError when the endpoint is set but the SDK is not installed.
    """
    if config.endpoint is None:
        return NOOP
    try:
        from gateway.observe.otel_sdk import OtelTracer
    except ImportError as exc:
        raise RuntimeError(f"otel.endpoint is set but the OpenTelemetry SDK is missing "
                           f"({exc.name}): {INSTALL_HINT}") from None
    return OtelTracer.start(config)

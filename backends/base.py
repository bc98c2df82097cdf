"""The one backend interface, and what every backend reports back.

A backend speaks to one configured model (possibly several replicas). It has
two calls, like tensorzero's ``infer`` / ``infer_stream``:

    completion = await backend.complete(call)        # -> Completion
    stream = await backend.stream(call)              # -> ChunkStream, first chunk already received
    async for event in stream: ...                   # SSEEvent: raw bytes + parsed JSON

Both raise only ``core.errors`` exceptions (converted at the backend edge).
Each backend keeps ``LiveStats``: smoothed TTFT, TPOT and in-flight count,
which the routing policy reads to predict latency.

Same protocol, no translation: a door whose wire protocol an upstream speaks
natively (Anthropic's Messages door, an ``anthropic`` model) hands the
client's own body along as ``call.native``. A backend that speaks that
protocol (its ``native_protocol``) sends it as the client wrote it, and
answers with ``Completion.native`` (or ``NativeEvent``s) beside the chat
form the pipeline reads; any other backend ignores it and sends ``payload``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from core.types import LiveStats
from core.usage import Usage

if TYPE_CHECKING:
    from backends.sse import SSEEvent

# The native protocols a door may hand along (``NativeRequest.protocol``).
ANTHROPIC_MESSAGES = "anthropic_messages"


@dataclass(frozen=True, slots=True)
class NativeRequest:
    """A door's own request body, for an upstream that speaks the door's protocol."""

    protocol: str                    # e.g. ANTHROPIC_MESSAGES
    body: dict[str, Any]             # as the client wrote it (the backend rewrites ``model``)
    headers: dict[str, str] = field(default_factory=dict)   # client headers it forwards


@dataclass(slots=True)
class UpstreamCall:
    """One request to send upstream. ``payload`` is the OpenAI body, already
    rewritten for this backend (model id, stream_options)."""

    request_id: str
    payload: dict[str, Any]
    prompt_tokens: int
    p_correct: float | None = None   # the router's prediction; the simulator draws from it
    headers: bytes = b""           # extra header lines, e.g. x-request-id and traceparent
    deadline: float | None = None  # time.monotonic() by which the request must be done
    max_events: int = 1 << 30      # a stream longer than this is cut by the gateway (not here)
    route: str = "chat/completions"   # the OpenAI route: or "completions", "embeddings"
    # The model's replica to prefer (its warm prefix: gateway/pipeline/warm.py); the
    # backend sets the one it used.
    replica: int | None = None
    # The prompt tokens the upstream must prefill (less what it probably caches); None:
    # the whole prompt.
    prefill_tokens: int | None = None
    native: NativeRequest | None = None   # the door's own body, for a backend that speaks it

    def bound_s(self, total_s: float) -> float:
        """How long a non-streamed call may take: ``total_s``, or less when the
        request's own deadline comes first (one timer bounds both)."""
        if self.deadline is None:
            return total_s
        return max(0.0, min(total_s, self.deadline - time.monotonic()))


@dataclass(slots=True)
class Completion:
    """A non-streamed answer: the upstream's bytes untouched, plus what we read from them."""

    body: bytes
    data: dict[str, Any]
    usage: Usage | None
    latency_s: float                 # the whole answer
    ttft_s: float | None = None      # time to the first token, when the server measures it
    native: bytes | None = None      # the answer in the call's native protocol (call.native)


class ChunkStream(Protocol):
    """An open upstream stream, its first event already received. Iterating
    yields ``SSEEvent``s; ``usage`` is filled in once the usage chunk passed."""

    @property
    def usage(self) -> Usage | None: ...

    @property
    def prompt_seen(self) -> Usage | None:
        """The upstream's count of the prompt (its cache reads and writes apart), when
        the stream said it before its end (Anthropic's ``message_start``): what a stream
        that breaks or is left before its usage chunk bills the prompt at."""
        ...

    @property
    def ttft_s(self) -> float: ...

    @property
    def tpot_s(self) -> float | None: ...

    @property
    def buffered(self) -> bool:
        """Whether more events are already here (the next one will not wait)."""
        ...

    def __aiter__(self) -> AsyncIterator[SSEEvent]: ...

    async def aclose(self) -> None: ...


class WrappedStream:
    """A ``ChunkStream`` around another one: what the upstream reported
    (usage, timings) is the wrapped stream's. Subclasses change iteration,
    buffering or closing."""

    def __init__(self, stream: ChunkStream) -> None:
        self._stream = stream

    @property
    def usage(self) -> Usage | None:
        return self._stream.usage

    @property
    def prompt_seen(self) -> Usage | None:
        return self._stream.prompt_seen

    @property
    def ttft_s(self) -> float:
        return self._stream.ttft_s

    @property
    def tpot_s(self) -> float | None:
        return self._stream.tpot_s

    @property
    def buffered(self) -> bool:
        return self._stream.buffered


class Backend(Protocol):
    name: str
    stats: LiveStats

    async def complete(self, call: UpstreamCall) -> Completion: ...

    async def stream(self, call: UpstreamCall) -> ChunkStream: ...

    async def ready(self) -> bool: ...

    async def aclose(self) -> None: ...

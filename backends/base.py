"""The one backend interface, and what every backend reports back.

A backend speaks to one configured model (possibly several replicas). It has
two calls, like tensorzero's ``infer`` / ``infer_stream``:

    completion = await backend.complete(call)        # -> Completion
    stream = await backend.stream(call)              # -> ChunkStream, first chunk already received
    async for event in stream: ...                   # SSEEvent: raw bytes + parsed JSON

Both raise only ``gateway.errors`` exceptions (converted at the backend edge).
Each backend keeps ``LiveStats``: smoothed TTFT, TPOT and in-flight count,
which the routing policy reads to predict latency.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from backends.sse import SSEEvent

EWMA_ALPHA = 0.2


@dataclass(slots=True)
class UpstreamCall:
    """One request to send upstream. ``payload`` is the OpenAI body, already
    rewritten for this backend (model id, stream_options)."""

    request_id: str
    payload: dict[str, Any]
    prompt_tokens: int
    p_correct: float | None = None   # the router's prediction; the simulator draws from it


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False

    @classmethod
    def from_wire(cls, usage: Any) -> Usage | None:
        if not isinstance(usage, dict):
            return None
        try:
            return cls(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        except (TypeError, ValueError):
            return None


@dataclass(slots=True)
class Completion:
    """A non-streamed answer: the upstream's bytes untouched, plus what we read from them."""

    body: bytes
    data: dict[str, Any]
    usage: Usage | None
    latency_s: float                 # the whole answer
    ttft_s: float | None = None      # time to the first token, when the server measures it
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class LiveStats:
    """Smoothed latency and load of one backend, updated by every request."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    in_flight: int = 0
    requests: int = 0
    failures: int = 0
    last_failure: float = 0.0

    def observe_ttft(self, seconds: float) -> None:
        self.ttft_s = seconds if self.ttft_s is None else (
            self.ttft_s + EWMA_ALPHA * (seconds - self.ttft_s)
        )

    def observe_tpot(self, seconds: float) -> None:
        self.tpot_s = seconds if self.tpot_s is None else (
            self.tpot_s + EWMA_ALPHA * (seconds - self.tpot_s)
        )

    def observe_failure(self) -> None:
        self.failures += 1
        self.last_failure = time.monotonic()


class ChunkStream(Protocol):
    """An open upstream stream, its first event already received. Iterating
    yields ``SSEEvent``s; ``usage`` is filled in once the usage chunk passed."""

    @property
    def usage(self) -> Usage | None: ...

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


class Backend(Protocol):
    name: str
    stats: LiveStats

    async def complete(self, call: UpstreamCall) -> Completion: ...

    async def stream(self, call: UpstreamCall) -> ChunkStream: ...

    async def ready(self) -> bool: ...

    async def aclose(self) -> None: ...

"""Reading an answer back: the message a completion or a stream carries.

    message, finish, logprobs = completion_message(completion.data)
    held = await HeldStream.hold(stream, max_events=2_200)   # every event read, nothing sent
    message, finish, logprobs = held.message()

A stream whose answer must be checked before the client sees it (structured
output, ``escalation.stream_mode: buffer``) is read to the end first, then
replayed byte for byte: the client's time to first token becomes the whole
generation, the price of never showing it an answer that gets replaced.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from backends.base import ChunkStream, WrappedStream
from backends.sse import SSEEvent
from gateway.pipeline.relay import too_long
from gateway.pipeline.tool_calls import ToolCalls


def _token_logprobs(logprobs: Any) -> list[float]:
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return []
    return [t["logprob"] for t in content
            if isinstance(t, dict) and isinstance(t.get("logprob"), int | float)]


def completion_message(data: Any) -> tuple[dict[str, Any], str | None, list[float]]:
    """(message, finish_reason, token logprobs) of a non-streamed answer's first choice."""
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else {}
    if not isinstance(choice, dict):
        return {}, None, []
    message = choice.get("message")
    return (message if isinstance(message, dict) else {}, choice.get("finish_reason"),
            _token_logprobs(choice.get("logprobs")))


def stream_message(events: list[SSEEvent]) -> tuple[dict[str, Any], str | None, list[float]]:
    """The first choice's message, assembled from a stream's deltas."""
    content: list[str] = []
    calls = ToolCalls()
    finish, logprobs = None, []
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        choices = data.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            if isinstance(delta.get("content"), str):
                content.append(delta["content"])
            calls.feed(delta.get("tool_calls"))
            finish = choice.get("finish_reason") or finish
            logprobs += _token_logprobs(choice.get("logprobs"))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls.calls:
        message["tool_calls"] = calls.assembled()
    return message, finish, logprobs


ANSWER_FIELDS = ("id", "created", "model", "system_fingerprint", "service_tier")


def streamed_answer(events: list[SSEEvent]) -> dict[str, Any]:
    """A stream's first choice, in the shape of a non-streamed answer: its id, model
    and the like as the stream's first chunk gave them (the response cache answers
    with it). Other choices and the logprobs are not kept."""
    message, finish, _ = stream_message(events)
    first = next((e.data for e in events if isinstance(e.data, dict)), {})
    head = {k: first[k] for k in ANSWER_FIELDS if first.get(k) is not None}
    return {**head, "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish}]}


class HeldStream(WrappedStream):
    """A stream read to its end and replayed: a ``ChunkStream`` that never waits."""

    def __init__(self, stream: ChunkStream, events: list[SSEEvent]) -> None:
        super().__init__(stream)
        self.events = events
        self.chunks = sum(e.has_tokens for e in events)

    @classmethod
    async def hold(cls, stream: ChunkStream, max_events: int) -> HeldStream:
        """Read ``stream`` to its end; one longer than ``max_events`` is cut (never
        held whole in memory) and fails as ``UpstreamTooLong``."""
        events: list[SSEEvent] = []
        try:
            async for event in stream:
                events.append(event)
                if len(events) > max_events:
                    raise too_long(max_events)
        finally:
            await stream.aclose()
        return cls(stream, events)

    def message(self) -> tuple[dict[str, Any], str | None, list[float]]:
        return stream_message(self.events)

    def strip_logprobs(self) -> None:
        """Drop the logprobs the gateway asked for on its own behalf."""
        for i, event in enumerate(self.events):
            choices = (event.data or {}).get("choices")
            if isinstance(choices, list) and any(
                    isinstance(c, dict) and c.get("logprobs") for c in choices):
                for c in choices:
                    if isinstance(c, dict):
                        c["logprobs"] = None
                self.events[i] = SSEEvent.from_data(event.data or {})

    @property
    def buffered(self) -> bool:
        return True

    async def __aiter__(self) -> AsyncIterator[SSEEvent]:
        for event in self.events:
            yield event

    async def aclose(self) -> None:
        return None

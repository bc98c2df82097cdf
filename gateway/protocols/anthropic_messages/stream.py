"""An upstream's stream of ``chat.completion.chunk`` events, as Anthropic's message stream.

    stream = MessagesStream(wire)          # one per request (the door's translator)
    stream.feed(event)                     # -> [b"event: message_start\\ndata: {...}\\n\\n", ...]
    await stream.finish(billed_usage)      # -> content_block_stop, message_delta, message_stop
    stream.fail(exc)                       # -> [b"event: error\\ndata: {...}\\n\\n"]

The events, in Anthropic's order: ``message_start`` (empty content, the
prompt's input tokens as the gateway counts them, as Anthropic sends its
count there) with the first chunk; then per content block a ``content_block_start`` (the
first followed by a ``ping``, as Anthropic sends it), its
``content_block_delta`` events (``text_delta`` for text, ``input_json_delta``
with the argument pieces for a tool call) and a ``content_block_stop``; then
``message_delta`` (stop_reason, stop_sequence and the billed usage) and
``message_stop``. The billed ``input_tokens`` go in ``message_delta`` as
well: the upstream's own count is known only then, and the SDK's
accumulator takes them from there. A stream that breaks ends in an ``error``
event, which the SDK raises. Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any

import orjson

from backends.sse import SSEEvent
from core.errors import GatewayError
from core.usage import Usage
from gateway.pipeline.tool_calls import Piece, ToolCalls
from gateway.protocols.anthropic_messages.errors import error_body, status_of
from gateway.protocols.anthropic_messages.parse import MessagesWire
from gateway.protocols.anthropic_messages.render import (
    first_choice,
    new_id,
    stop_reason,
    usage_block,
)

TEXT, TOOL = "text", "tool_use"


def sse(event: str, payload: dict[str, Any]) -> bytes:
    """One event as Anthropic frames it: an ``event:`` line naming the ``type``, then data."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


class MessagesStream:
    """The translator for one streamed request (``gateway.protocols.base.StreamTranslator``)."""

    def __init__(self, wire: MessagesWire, message_id: str | None = None, *,
                 prompt_tokens: int = 0) -> None:
        self.wire = wire
        self.prompt_tokens = prompt_tokens    # our count, until the upstream's usage comes
        self.message_id = message_id or new_id("msg")
        self.started = False
        self.blocks = 0                  # content blocks started
        self.open: str | None = None     # the kind of the open block (the last one), if any
        self.tools: dict[int, int] = {}  # upstream tool_call index -> its block's index
        self.tool_calls = ToolCalls()    # their fragments, checked (pipeline/tool_calls.py)
        self.finish_reason: Any = None
        self.named_stop: Any = None
        self.refused = False             # the text is OpenAI's ``refusal``

    def feed(self, event: SSEEvent) -> list[bytes]:
        data = event.data or {}
        out = [] if self.started else self._start(data.get("model"))
        choice = first_choice(data.get("choices"))
        delta = choice.get("delta")
        if isinstance(delta, dict):
            out.extend(self._delta_events(delta))
        if choice.get("finish_reason") is not None:
            self.finish_reason, self.named_stop = choice["finish_reason"], choice.get("stop_reason")
        return out

    def _delta_events(self, delta: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        text, refusal = delta.get("content"), delta.get("refusal")
        if isinstance(text, str) and text:
            out.extend(self._text(text))
        elif isinstance(refusal, str) and refusal:
            self.refused = True
            out.extend(self._text(refusal))
        for piece in self.tool_calls.feed(delta.get("tool_calls")):
            out.extend(self._tool_call(piece))
        return out

    async def finish(self, usage: Usage) -> list[bytes]:
        out = [] if self.started else self._start(None)
        out.extend(self._close())
        reason, sequence = stop_reason(self.finish_reason, self.named_stop, self.wire,
                                       called_tools=bool(self.tools), refused=self.refused)
        out.append(sse("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": usage_block(usage, split=False)}))
        out.append(sse("message_stop", {"type": "message_stop"}))
        return out

    def fail(self, exc: GatewayError) -> list[bytes]:
        return [sse("error", error_body(exc, status_of(exc)))]

    def _start(self, model: Any) -> list[bytes]:
        self.started = True
        name = model if isinstance(model, str) and model else self.wire.model
        message: dict[str, Any] = {
            "id": self.message_id, "type": "message", "role": "assistant", "model": name,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": usage_block(Usage(self.prompt_tokens, 0), split=False)}
        return [sse("message_start", {"type": "message_start", "message": message})]

    def _open(self, kind: str, block: dict[str, Any]) -> list[bytes]:
        out = self._close()
        self.open = kind
        self.blocks += 1
        out.append(sse("content_block_start", {"type": "content_block_start",
                                               "index": self.blocks - 1, "content_block": block}))
        if self.blocks == 1:      # where Anthropic's own streams send their ping
            out.append(sse("ping", {"type": "ping"}))
        return out

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [sse("content_block_stop", {"type": "content_block_stop", "index": self.blocks - 1})]

    def _delta(self, index: int, delta: dict[str, Any]) -> bytes:
        return sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                           "delta": delta})

    def _text(self, text: str) -> list[bytes]:
        out = [] if self.open == TEXT else self._open(TEXT, {"type": "text", "text": ""})
        out.append(self._delta(self.blocks - 1, {"type": "text_delta", "text": text}))
        return out

    def _tool_call(self, piece: Piece) -> list[bytes]:
        """A piece of a tool call: its first starts a tool_use block, arguments are deltas."""
        out: list[bytes] = []
        if piece.started:
            out = self._open(TOOL, {"type": "tool_use", "id": piece.id or new_id("toolu"),
                                    "name": piece.name, "input": {}})
            self.tools[piece.index] = self.blocks - 1
        if piece.arguments:
            out.append(self._delta(self.tools[piece.index], {"type": "input_json_delta",
                                                             "partial_json": piece.arguments}))
        return out

"""Anthropic's stream events as OpenAI ``chat.completion.chunk``s: pure, no I/O.

    chunks = ChatChunks(model="claude-haiku", created=1_700_000_000)
    chunk = chunks.feed(event_data)       # one chat chunk, or None (a ping, a block's end)
    chunks.finished, chunks.usage         # after message_stop: the usage chunk came out

    message_start                 -> the role chunk; its usage (input and cache counts) kept
    content_block_start text      -> (its text, if any)
    content_block_start tool_use  -> a tool call's first fragment: index, id, name
    text_delta / thinking_delta   -> ``content`` / ``reasoning_content``
    input_json_delta              -> the call's ``arguments`` fragment (the pieces are
                                     assembled downstream, by gateway/pipeline/tool_calls.py)
    content_block_stop            -> "{}" for a tool call that got no arguments at all
    message_delta                 -> the finish_reason chunk; its (cumulative) usage kept
    message_stop                  -> the usage chunk: message_start's usage overwritten
                                     by message_delta's non-null fields, never added
    ping, signature and citation deltas, unknown events -> nothing
    error                         -> raised as the gateway's error (``errors.event_error``)

Block indexes are the upstream's word: one that is not a small integer is
ignored, and at most ``MAX_TOOL_CALLS`` tool calls are numbered.
"""

from __future__ import annotations

from typing import Any

from backends.anthropic_messages.errors import event_error
from backends.anthropic_messages.from_wire import finish_reason, merged_usage, usage_json, usage_of
from core.usage import Usage

MAX_TOOL_CALLS = 128
UNREADABLE = {"prompt_tokens": "unreadable", "completion_tokens": "unreadable"}


class ChatChunks:
    """The translator of one stream (its state: the ids, open tool calls, usage)."""

    def __init__(self, model: str, created: int, known: tuple[str, ...] = ()) -> None:
        self.model, self.created = model, created
        self.known = known                  # secrets to scrub from an error's message
        self.id = ""
        self.started = False
        self.finished = False               # message_stop came
        self.tools: dict[int, int] = {}     # content block index -> tool call index
        self.argued: set[int] = set()       # tool blocks that got some arguments
        self._start_usage: Any = None
        self._delta_usage: Any = None

    @property
    def usage(self) -> Usage | None:
        if not self.started:
            return None
        return usage_of(merged_usage(self._start_usage, self._delta_usage))

    @property
    def start_usage(self) -> Usage | None:
        """``message_start``'s usage alone: the prompt as Anthropic counted it."""
        return usage_of(self._start_usage) if self.started else None

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def usage_chunk(self) -> dict[str, Any]:
        usage = self.usage
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [],
                "usage": usage_json(usage) if usage is not None else UNREADABLE}

    def feed(self, data: dict[str, Any]) -> dict[str, Any] | None:
        kind = data.get("type")
        if kind == "message_start":
            return self._message_start(data.get("message"))
        if kind == "content_block_start":
            return self._block_start(data.get("index"), data.get("content_block"))
        if kind == "content_block_delta":
            return self._block_delta(data.get("index"), data.get("delta"))
        if kind == "content_block_stop":
            index = data.get("index")
            if index in self.tools and index not in self.argued:
                return self._arguments(index, "{}")
            return None
        if kind == "message_delta":
            delta = data.get("delta")
            self._delta_usage = data.get("usage")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            return self.chunk({}, finish_reason(reason))
        if kind == "message_stop":
            self.finished = True
            return self.usage_chunk()
        if kind == "error":
            raise event_error(self.model, data.get("error"), self.known)
        return None

    def _message_start(self, message: Any) -> dict[str, Any]:
        message = message if isinstance(message, dict) else {}
        self.started = True
        self.id = str(message.get("id") or "")
        self._start_usage = message.get("usage")
        return self.chunk({"role": "assistant", "content": ""})

    def _block_start(self, index: Any, block: Any) -> dict[str, Any] | None:
        if not _is_index(index) or not isinstance(block, dict):
            return None
        kind = block.get("type")
        if kind == "tool_use" and len(self.tools) < MAX_TOOL_CALLS:
            call = self.tools[index] = len(self.tools)
            return self.chunk({"tool_calls": [{
                "index": call, "id": str(block.get("id") or ""), "type": "function",
                "function": {"name": str(block.get("name") or ""), "arguments": ""}}]})
        if kind == "text" and isinstance(block.get("text"), str) and block["text"]:
            return self.chunk({"content": block["text"]})
        return None

    def _block_delta(self, index: Any, delta: Any) -> dict[str, Any] | None:
        if not _is_index(index) or not isinstance(delta, dict):
            return None
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            return self.chunk({"content": delta["text"]})
        if kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            return self.chunk({"reasoning_content": delta["thinking"]})
        piece = delta.get("partial_json")
        if kind == "input_json_delta" and index in self.tools and isinstance(piece, str) and piece:
            self.argued.add(index)
            return self._arguments(index, piece)
        return None

    def _arguments(self, index: int, piece: str) -> dict[str, Any]:
        return self.chunk({"tool_calls": [{"index": self.tools[index],
                                           "function": {"arguments": piece}}]})


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 20

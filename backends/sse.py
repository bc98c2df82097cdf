"""Server-sent events as OpenAI streams them: pure functions, no network.

    split = EventSplitter()
    for raw in split.feed(b'data: {"x": 1}\\n\\ndata: [DONE]\\n\\n'):
        event = SSEEvent.parse(raw)

The gateway relays each event's raw bytes untouched; it parses the JSON only
to read usage and timing (and, later, to validate output).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


@dataclass(slots=True)
class SSEEvent:
    raw: bytes                       # the whole event, ending in a blank line
    data: dict[str, Any] | None      # parsed JSON payload, None for [DONE] or comments
    done: bool = False
    _generated: str | None = field(default=None, repr=False, compare=False)   # read once

    @classmethod
    def parse(cls, raw: bytes) -> SSEEvent:
        if raw.startswith(b"data: ") and raw.find(b"\n") == len(raw) - 2:
            payload = raw[6:-2].strip()      # the usual shape: one data line
        else:
            payload = b""
            for line in raw.split(b"\n"):
                if line.startswith(b"data:"):
                    payload += line[5:].strip()
        if not payload:
            return cls(raw, None)
        if payload == b"[DONE]":
            return cls(raw, None, done=True)
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return cls(raw, None)
        return cls(raw, data if isinstance(data, dict) else None)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> SSEEvent:
        return cls(b"data: " + orjson.dumps(data) + b"\n\n", data)

    @property
    def is_usage_only(self) -> bool:
        """OpenAI's final usage chunk: ``choices: []`` and a usage object."""
        d = self.data
        return d is not None and not d.get("choices") and d.get("usage") is not None

    @property
    def has_tokens(self) -> bool:
        """Whether this chunk carries generated text or tool-call arguments (chat), or
        text (a legacy completion)."""
        return bool(self.generated)

    @property
    def generated(self) -> str:
        """What this chunk generated: text, reasoning, tool calls' names and arguments
        (chat), or text (a legacy completion); "" for none. What a stream cut short is
        billed for is counted from these. Read once per event (the backend's timing
        and the relay both ask)."""
        out = self._generated
        if out is None:
            out = self._generated = _generated(self.data)
        return out

    @property
    def error(self) -> dict[str, Any] | None:
        d = self.data
        if d is not None and isinstance(d.get("error"), dict):
            return d["error"]
        return None


@dataclass(slots=True)
class NativeEvent(SSEEvent):
    """An event of a stream served in the door's own protocol (``backends/base.py``,
    ``NativeRequest``): ``native`` is the upstream's event for the door to relay
    as it is; ``raw`` and ``data`` are its chat-chunk form for the pipeline (usage,
    answer checks, shadows), ``data`` None when it has none (a ping)."""

    native: bytes = b""
    protocol: str = ""


def _generated(d: dict[str, Any] | None) -> str:
    choices = d.get("choices") if d else None
    if type(choices) is not list:
        return ""
    if len(choices) == 1:     # the usual chunk: one choice, a delta of text at most
        delta = choices[0].get("delta") if type(choices[0]) is dict else None
        if type(delta) is dict and "tool_calls" not in delta and "reasoning_content" not in delta:
            content = delta.get("content")
            return content if type(content) is str else ""
    out = ""
    for choice in choices:
        # An upstream's malformed chunk must not crash the relay: check the shapes.
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            for key in ("content", "reasoning_content"):
                if isinstance(delta.get(key), str):
                    out += delta[key]
            calls = delta.get("tool_calls")
            if calls:
                out += _call_text(calls)
        elif isinstance(choice.get("text"), str):          # a legacy completion's chunk
            out += choice["text"]
    return out


def _call_text(calls: Any) -> str:
    out = ""
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            for part in ("name", "arguments"):
                if isinstance(fn.get(part), str):
                    out += fn[part]
    return out


class EventSplitter:
    """Reassembles SSE events from arbitrary network chunks."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buffer + chunk
        if b"\r\n" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        events = []
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            event = buf[start : end + 2]
            if event.strip():
                events.append(event)
            start = end + 2
        self._buffer = buf[start:]
        return events

    def flush(self) -> list[bytes]:
        rest, self._buffer = self._buffer, b""
        return [rest + b"\n\n"] if rest.strip() else []

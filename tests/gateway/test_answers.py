"""Assembling a streamed answer from its events (``gateway/pipeline/answers.py``).

The events are the upstream's: a malformed tool-call delta or choice is
skipped, so a shadow's or an escalation's reading of the stream cannot raise.
"""

import orjson

from backends.sse import SSEEvent
from gateway.pipeline.answers import stream_message
from gateway.pipeline.tool_calls import MAX_TOOL_CALLS


def _event(data: object) -> SSEEvent:
    return SSEEvent(raw=b"data: " + orjson.dumps(data) + b"\n\n", data=data)  # type: ignore[arg-type]


def _delta(**delta: object) -> SSEEvent:
    return _event({"choices": [{"index": 0, "delta": delta}]})


def test_tool_calls_and_content_are_assembled_in_index_order() -> None:
    events = [_delta(content="Hel"), _delta(content="lo"),
              _delta(tool_calls=[{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}]),
              _delta(tool_calls=[{"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x"'}}]),
              _delta(tool_calls=[{"index": 0, "function": {"arguments": ": 1}"}}]),
              _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})]
    message, finish, _ = stream_message(events)
    assert message["content"] == "Hello" and finish == "tool_calls"
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"])
            for c in message["tool_calls"]] == [("a", "f", '{"x": 1}'), ("b", "g", "{}")]


def test_malformed_upstream_pieces_are_skipped_not_raised() -> None:
    events = [
        _delta(tool_calls=[{"index": "zero", "function": {"name": "f"}},       # not an int
                           {"index": True, "function": {"name": "f"}},         # a bool
                           {"index": MAX_TOOL_CALLS, "function": {"name": "f"}},
                           {"index": -1, "function": {"name": "f"}},
                           {"index": 0, "function": "f"},                      # not an object
                           {"index": 0, "id": 7, "function": {"name": 3, "arguments": ["x"]}},
                           "call"]),
        _event({"choices": "none"}), _event({"choices": [{"index": 0, "delta": "text"}]}),
        _event([1, 2]), _delta(content="ok"),
    ]
    message, _, _ = stream_message(events)
    assert message["content"] == "ok"
    # Only the well-formed index (0) made a call, and nothing malformed joined it.
    assert message["tool_calls"] == [{"type": "function", "function": {"name": "", "arguments": ""}}]

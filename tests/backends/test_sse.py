from __future__ import annotations

from backends.sse import EventSplitter, SSEEvent


def test_splitter_reassembles_events_across_chunks() -> None:
    split = EventSplitter()
    wire = b'data: {"a": 1}\n\ndata: {"b": 2}\r\n\r\ndata: [DONE]\n\n'
    events = []
    for i in range(0, len(wire), 5):
        events += split.feed(wire[i : i + 5])
    events += split.flush()
    parsed = [SSEEvent.parse(e) for e in events]
    assert [p.data for p in parsed[:2]] == [{"a": 1}, {"b": 2}]
    assert parsed[2].done


def test_usage_only_chunk_is_recognised() -> None:
    event = SSEEvent.parse(b'data: {"choices": [], "usage": {"prompt_tokens": 1}}\n\n')
    assert event.is_usage_only
    assert not SSEEvent.parse(b'data: {"choices": [{"delta": {}}], "usage": null}\n\n').is_usage_only


def test_malformed_chunks_carry_no_tokens() -> None:
    for raw in (b'data: {"choices": [1]}\n\n', b'data: {"choices": [{"delta": "x"}]}\n\n',
                b'data: {"choices": 5}\n\n'):
        assert not SSEEvent.parse(raw).has_tokens

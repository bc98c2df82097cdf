"""The Responses stream translator and the response object, against recorded chat streams.

The chat chunks are OpenAI's own, recorded by the openai-python SDK's tests
(``.inline-snapshot/external/038a5c69….bin``: a text answer, and
``453df473….bin``: two parallel tool calls), shortened where they repeat.
Every event that comes out is validated by the SDK's own types (pydantic,
strictly) and fed to its stream accumulator (``ResponseStreamState``), which
must arrive at the same response as the ``response.completed`` event.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from openai import omit
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from backends.sse import SSEEvent
from core.errors import UpstreamError
from core.usage import Usage
from gateway.protocols.openai_responses.model import read_request
from gateway.protocols.openai_responses.parse import ResponsesWire, translate
from gateway.protocols.openai_responses.render import assistant_message, completed_response
from gateway.protocols.openai_responses.stream import ResponsesStream

EVENTS = TypeAdapter(ResponseStreamEvent)
HEAD = {"id": "chatcmpl-9tXjg9DdaOfymTPDrSLfxslQEH0C2", "object": "chat.completion.chunk",
        "created": 1723024748, "model": "gpt-4o-2024-08-06", "system_fingerprint": "fp_845eaabc1f"}


def chunk(delta: dict[str, Any], finish: str | None = None) -> SSEEvent:
    return SSEEvent.from_data({**HEAD, "choices": [
        {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})


def tool(index: int, arguments: str, call_id: str | None = None, name: str | None = None
         ) -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        fragment.update(id=call_id, type="function")
        fragment["function"]["name"] = name
    return {"tool_calls": [fragment]}


# 038a5c69…: role first (content "", refusal null), then one token a chunk, then the finish.
TEXT = [chunk({"role": "assistant", "content": "", "refusal": None}),
        *(chunk({"content": t}) for t in ("I'm", " unable", " to", " provide")),
        chunk({}, "stop")]
# 453df473…: two calls, each opened with its id and name, its arguments in pieces.
CALLS = [chunk({"role": "assistant", "content": None}),
         chunk(tool(0, "", "call_lQnnsesjFMWMQ5IeWPHzR4th", "GetWeatherArgs")),
         *(chunk(tool(0, a)) for a in ('{"ci', 'ty": ', '"Edinb', 'urgh"}')),
         chunk(tool(1, "", "call_2xjOUgaCdiwAcl9ZBL9LyMUU", "get_stock_price")),
         *(chunk(tool(1, a)) for a in ('{"ti', 'cker"', ': "AAP', 'L"}')),
         chunk({}, "tool_calls")]
USAGE = Usage(14, 47)


def wire(store: bool = True) -> ResponsesWire:
    body = {"model": "fast", "input": "What's the weather like in SF?", "store": store}
    _, w = translate(read_request(body), body, [], response_id="resp_test", created_at=1)
    return w


def parse_sse(raw: bytes) -> list[dict[str, Any]]:
    """The events as the SDK's SSE decoder sees them: ``event:`` must name the data's type."""
    out = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        head, data = block.split(b"\n")
        event = orjson.loads(data.removeprefix(b"data: "))
        assert head == b"event: " + event["type"].encode()
        out.append(event)
    return out


def run(chunks: list[SSEEvent], usage: Usage = USAGE, fail: Exception | None = None,
        w: ResponsesWire | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the events, the responses handed to ``save``) of one translated stream."""
    saved: list[dict[str, Any]] = []

    async def save(response: dict[str, Any]) -> None:
        saved.append(orjson.loads(orjson.dumps(response)))

    stream = ResponsesStream(w or wire(), "fast", save=save, clock=lambda: 2.0)
    raw = b"".join(b"".join(stream.feed(c)) for c in chunks)
    if fail is not None:
        raw += b"".join(stream.fail(fail))     # type: ignore[arg-type]
    else:
        raw += b"".join(asyncio.run(stream.finish(usage)))
    return parse_sse(raw), saved


def accumulated(events: list[dict[str, Any]]) -> Any:
    """Each event through the SDK's types and accumulator; the final response it built."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    final = None
    for event in events:
        for out in state.handle_event(EVENTS.validate_python(event)):
            if out.type == "response.completed":
                final = out.response
    return final


def test_a_recorded_text_stream_becomes_openais_event_sequence() -> None:
    events, saved = run(TEXT)
    msg = "msg_test00"
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    done_part = {**part, "text": "I'm unable to provide"}
    item = {"id": msg, "type": "message", "status": "completed", "role": "assistant",
            "content": [done_part]}
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [{k: v for k, v in e.items() if k not in ("sequence_number", "response")}
            for e in events] == [
        {"type": "response.created"},
        {"type": "response.in_progress"},
        {"type": "response.output_item.added", "output_index": 0, "item": {
            "id": msg, "type": "message", "status": "in_progress", "role": "assistant",
            "content": []}},
        {"type": "response.content_part.added", "item_id": msg, "output_index": 0,
         "content_index": 0, "part": part},
        *({"type": "response.output_text.delta", "item_id": msg, "output_index": 0,
           "content_index": 0, "delta": t, "logprobs": []} for t in ("I'm", " unable", " to", " provide")),
        {"type": "response.output_text.done", "item_id": msg, "output_index": 0, "content_index": 0,
         "text": "I'm unable to provide", "logprobs": []},
        {"type": "response.content_part.done", "item_id": msg, "output_index": 0,
         "content_index": 0, "part": done_part},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed"},
    ]
    created, final = events[0]["response"], events[-1]["response"]
    assert (created["status"], created["output"], created["usage"]) == ("in_progress", [], None)
    assert created["model"] == "gpt-4o-2024-08-06"      # the upstream's, as the chat door shows it
    assert final["status"] == "completed" and final["output"] == [item]
    assert final["usage"] == {"input_tokens": 14, "output_tokens": 47, "total_tokens": 61,
                              "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                              "output_tokens_details": {"reasoning_tokens": 0}}
    assert (final["completed_at"], final["store"]) == (2, True)
    assert saved == [final]                              # stored before its last event went out
    assert accumulated(events).output_text == "I'm unable to provide"


def test_recorded_parallel_tool_calls_become_function_call_items() -> None:
    events, _ = run(CALLS)
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", *["response.function_call_arguments.delta"] * 4,
        "response.function_call_arguments.done", "response.output_item.done",
        "response.output_item.added", *["response.function_call_arguments.delta"] * 4,
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed"]
    added = events[2]["item"]
    assert added == {"id": "fc_test00", "type": "function_call", "status": "in_progress",
                     "call_id": "call_lQnnsesjFMWMQ5IeWPHzR4th", "name": "GetWeatherArgs",
                     "arguments": ""}
    assert {k: events[7][k] for k in ("item_id", "name", "output_index", "arguments")} == {
        "item_id": "fc_test00", "name": "GetWeatherArgs", "output_index": 0,
        "arguments": '{"city": "Edinburgh"}'}
    final = events[-1]["response"]
    assert [(o["id"], o["call_id"], o["name"], o["arguments"], o["status"]) for o in final["output"]] == [
        ("fc_test00", "call_lQnnsesjFMWMQ5IeWPHzR4th", "GetWeatherArgs", '{"city": "Edinburgh"}',
         "completed"),
        ("fc_test01", "call_2xjOUgaCdiwAcl9ZBL9LyMUU", "get_stock_price", '{"ticker": "AAPL"}',
         "completed")]
    parsed = accumulated(events)
    assert [o.arguments for o in parsed.output] == ['{"city": "Edinburgh"}', '{"ticker": "AAPL"}']


def test_text_then_a_call_closes_the_message_first() -> None:
    events, _ = run([chunk({"role": "assistant", "content": "Checking."}),
                     chunk(tool(0, '{"city":"Paris"}', "call_1", "get_weather")),
                     chunk({}, "tool_calls")])
    assert [e["type"] for e in events][2:] == [
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["message", "function_call"]
    assert accumulated(events).output[1].call_id == "call_1"


def test_a_length_finish_is_incomplete_with_max_output_tokens() -> None:
    events, _ = run([chunk({"content": "cut"}), chunk({}, "length")])
    last = events[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["status"] == "incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["output"][0]["status"] == "incomplete"
    EVENTS.validate_python(last)


def test_an_empty_answer_is_an_empty_message_as_unstreamed() -> None:
    events, _ = run([chunk({"role": "assistant", "content": ""}), chunk({}, "stop")])
    final = events[-1]["response"]
    assert final["output"][0]["content"] == [
        {"type": "output_text", "text": "", "annotations": [], "logprobs": []}]
    unstreamed = completed_response(wire(), {"model": "gpt-4o-2024-08-06", "choices": [
        {"message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}]}, USAGE, 2)
    assert unstreamed["output"] == final["output"]


def test_a_stream_broken_midway_ends_failed_then_with_an_error_the_sdk_raises() -> None:
    events, saved = run(TEXT[:3], fail=UpstreamError("The upstream stream broke."))
    assert [e["type"] for e in events][-2:] == ["response.failed", "error"]
    failed, error = events[-2], events[-1]
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {"code": "server_error", "param": None,
                                           "message": "The upstream stream broke.",
                                           "type": "upstream_error"}
    # OpenAI's documented flat fields, and the error object the SDK raises on.
    assert {k: error[k] for k in ("code", "message", "param")} == {
        "code": "upstream_error", "message": "The upstream stream broke.", "param": None}
    assert error["error"] == {"message": "The upstream stream broke.", "type": "upstream_error",
                              "param": None, "code": "upstream_error"}
    for event in events:
        EVENTS.validate_python(event)
    assert saved == []                                  # a failed response is not stored


def test_a_stream_that_fails_before_any_chunk_still_starts_properly() -> None:
    events, _ = run([], fail=UpstreamError("gone"))
    assert [e["type"] for e in events] == ["response.created", "response.in_progress",
                                           "response.failed", "error"]
    assert events[0]["response"]["model"] == "fast"     # the model the client asked for


@pytest.mark.parametrize("chunks", [TEXT, CALLS], ids=["text", "calls"])
def test_streamed_and_unstreamed_answers_are_the_same_response(chunks: list[SSEEvent]) -> None:
    events, _ = run(chunks)
    streamed = events[-1]["response"]
    text = "".join(c.data["choices"][0]["delta"].get("content") or "" for c in chunks)   # type: ignore[index]
    calls = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
             for call_id, name, args in (("call_lQnnsesjFMWMQ5IeWPHzR4th", "GetWeatherArgs",
                                          '{"city": "Edinburgh"}'),
                                         ("call_2xjOUgaCdiwAcl9ZBL9LyMUU", "get_stock_price",
                                          '{"ticker": "AAPL"}'))]
    message = {"role": "assistant", "content": text or None,
               **({"tool_calls": calls} if chunks is CALLS else {})}
    finish = "tool_calls" if chunks is CALLS else "stop"
    unstreamed = completed_response(wire(), {"model": HEAD["model"], "choices": [
        {"index": 0, "message": message, "finish_reason": finish}]}, USAGE, 2)
    assert unstreamed == streamed
    Response.model_validate(unstreamed)                 # the SDK's own type, strictly
    # What is stored to continue the conversation is the assistant's chat message.
    assert assistant_message(unstreamed["output"]) == message


FINISHES = [("stop", "completed", None), ("tool_calls", "completed", None), (None, "completed", None),
            ("length", "incomplete", {"reason": "max_output_tokens"}),
            ("content_filter", "incomplete", {"reason": "content_filter"})]


@pytest.mark.parametrize(("finish", "status", "details"), FINISHES)
def test_the_finish_reason_sets_status_and_incomplete_details(finish: str | None, status: str,
                                                              details: Any) -> None:
    response = completed_response(wire(), {"model": "m", "choices": [
        {"message": {"role": "assistant", "content": "x"}, "finish_reason": finish}]}, USAGE, 2)
    assert (response["status"], response["incomplete_details"]) == (status, details)
    assert response["output"][0]["status"] == ("incomplete" if details else "completed")
    Response.model_validate(response)


ODD_ANSWERS = [
    ("content as parts", {"content": [{"type": "text", "text": "x"}]}, "stop"),
    ("a finish reason that is a list", {"content": "x"}, ["stop"]),
    ("a call whose function is a string", {"content": None, "tool_calls": [{"id": "c", "function": "f"}]},
     "tool_calls"),
    ("calls that are not objects", {"content": "x", "tool_calls": ["c", 1]}, "tool_calls"),
]


@pytest.mark.parametrize(("case", "message", "finish"), ODD_ANSWERS, ids=[c[0] for c in ODD_ANSWERS])
def test_an_upstreams_odd_answer_still_renders_a_valid_response(case: str, message: dict,
                                                                finish: Any) -> None:
    response = completed_response(wire(), {"model": "m", "choices": [
        {"message": {"role": "assistant", **message}, "finish_reason": finish}]}, USAGE, 2)
    Response.model_validate(response)


def test_odd_stream_chunks_are_skipped_not_fatal() -> None:
    # One accumulator checks every stream's tool-call fragments (pipeline/tool_calls.py):
    # an index that is not an integer, or a fragment that is not an object, is skipped.
    odd = [SSEEvent.from_data({"choices": "nope"}), SSEEvent.from_data({"choices": [7]}),
           chunk({"tool_calls": [{"index": [0], "id": "x", "function": {"name": "g"}}]}),
           chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]}),
           chunk({"tool_calls": ["x"]}), chunk({}, ["stop"])]       # type: ignore[arg-type]
    events, _ = run(odd)
    assert events[-1]["type"] == "response.completed"
    (call,) = accumulated(events).output
    assert (call.call_id, call.name, call.arguments) == ("c", "f", "{}")  # type: ignore[union-attr]

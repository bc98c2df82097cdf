"""The Anthropic Messages door's pure translations, table by table: no network.

Requests in (Anthropic's fields -> the chat body the pipeline serves), answers
out (a ``chat.completion`` -> an Anthropic message, checked by the SDK's own
``Message`` model), and the error tree -> Anthropic's types and statuses.
"""

from __future__ import annotations

from typing import Any

import anthropic
import orjson
import pytest

from core import errors
from core.usage import Usage
from gateway.protocols.anthropic_messages.errors import render_error
from gateway.protocols.anthropic_messages.model import read_request
from gateway.protocols.anthropic_messages.parse import (
    MessagesWire,
    messages_request,
    to_chat_body,
)
from gateway.protocols.anthropic_messages.render import RAW_ARGUMENTS, to_message

USER = [{"role": "user", "content": "Hi"}]
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}},
                  "required": ["city"]}
WEATHER = {"name": "get_weather", "description": "Weather now", "input_schema": WEATHER_SCHEMA}
CHAT_WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                                 "parameters": WEATHER_SCHEMA}}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "fast", "max_tokens": 64, "messages": USER, **fields}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "fast", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}],
            **fields}


TOOL_HISTORY = [
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "two calls", "signature": "sig"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
         "content": [{"type": "text", "text": "timeout"}, {"type": "text", "text": "retry"}]},
        {"type": "text", "text": "Which is warmer?"}]},
]
CHAT_TOOL_HISTORY = [
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "toolu_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
        {"id": "toolu_2", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
    {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: timeout\nretry"},
    {"role": "user", "content": "Which is warmer?"},
]
PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}

REQUESTS = {
    "plain": (body(), chat()),
    "sampling, stops and user": (
        body(temperature=0.2, top_p=0.9, stop_sequences=["\n\nHuman:"],
             metadata={"user_id": "u-42"}, stream=True),
        chat(temperature=0.2, top_p=0.9, stop=["\n\nHuman:"], user="u-42", stream=True)),
    "top_k and thinking are dropped": (
        body(top_k=5, thinking={"type": "enabled", "budget_tokens": 1024}), chat()),
    "system string": (
        body(system="Be terse."),
        chat(messages=[{"role": "system", "content": "Be terse."}, USER[0]])),
    "system blocks": (
        body(system=[{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}},
                     {"type": "text", "text": "Answer in French."}]),
        chat(messages=[{"role": "system", "content": "Be terse.\nAnswer in French."}, USER[0]])),
    "tool round trip history": (
        body(messages=TOOL_HISTORY, tools=[WEATHER]),
        chat(messages=CHAT_TOOL_HISTORY, tools=[CHAT_WEATHER])),
    "tool_choice auto": (
        body(tools=[WEATHER], tool_choice={"type": "auto"}),
        chat(tools=[CHAT_WEATHER], tool_choice="auto")),
    "tool_choice any, no parallel calls": (
        body(tools=[WEATHER], tool_choice={"type": "any", "disable_parallel_tool_use": True}),
        chat(tools=[CHAT_WEATHER], tool_choice="required", parallel_tool_calls=False)),
    "tool_choice tool": (
        body(tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}),
        chat(tools=[CHAT_WEATHER],
             tool_choice={"type": "function", "function": {"name": "get_weather"}})),
    "tool_choice none": (
        body(tools=[WEATHER], tool_choice={"type": "none"}),
        chat(tools=[CHAT_WEATHER], tool_choice="none")),
    "tool_choice without tools means nothing": (body(tool_choice={"type": "auto"}), chat()),
    "a tool without description": (
        body(tools=[{"name": "now", "input_schema": {"type": "object"}, "type": "custom"}]),
        chat(tools=[{"type": "function", "function": {"name": "now",
                                                      "parameters": {"type": "object"}}}])),
    "images become image_url parts": (
        body(messages=[{"role": "user", "content": [
            {"type": "image", "source": PNG},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
            {"type": "text", "text": "Same picture?"}]}]),
        chat(messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
            {"type": "text", "text": "Same picture?"}]}])),
    "a text document is its title, context and text": (
        body(messages=[{"role": "user", "content": [
            {"type": "document", "title": "Memo", "context": "internal",
             "citations": {"enabled": True}, "cache_control": {"type": "ephemeral"},
             "source": {"type": "text", "media_type": "text/plain", "data": "Ship on Friday."}},
            {"type": "document", "source": {"type": "content", "content": [
                {"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]}},
            {"type": "text", "text": "When do we ship?"}]}]),
        chat(messages=[{"role": "user", "content": [
            {"type": "text", "text": "Memo\n\ninternal\n\nShip on Friday."},
            {"type": "text", "text": "Part one.\nPart two."},
            {"type": "text", "text": "When do we ship?"}]}])),
    "text blocks, then a prefilled assistant turn": (
        body(messages=[{"role": "user", "content": [{"type": "text", "text": "Count:"},
                                                   {"type": "text", "text": "go"}]},
                       {"role": "assistant", "content": "1, 2,"}]),
        chat(messages=[{"role": "user", "content": [{"type": "text", "text": "Count:"},
                                                   {"type": "text", "text": "go"}]},
                       {"role": "assistant", "content": "1, 2,"}])),
}


@pytest.mark.parametrize("case", REQUESTS)
def test_request_becomes_the_chat_body(case: str) -> None:
    anthropic_body, expected = REQUESTS[case]
    assert to_chat_body(read_request(anthropic_body)) == expected


def test_the_pipeline_request_keeps_what_the_door_renders_with() -> None:
    req = messages_request(body(tools=[WEATHER], stream=True, stop_sequences=["END"]), {})
    assert req.wire == MessagesWire("fast", ("END",))
    assert (req.model, req.stream, req.max_tokens, req.has_tools) == ("fast", True, 64, True)
    assert req.messages == [{"role": "user", "content": "Hi"}]
    routed = messages_request(body(model="auto:0.9"), {})
    assert (routed.model, routed.quality) == ("auto", 0.9)


def test_the_request_keeps_the_clients_own_body_for_a_native_upstream() -> None:
    sent = body(system=[{"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}}],
                thinking={"type": "enabled", "budget_tokens": 1024})
    req = messages_request(sent, {"anthropic-beta": "files-api-2025-04-14"})
    assert req.native is not None and req.native.protocol == "anthropic_messages"
    assert req.native.body is sent          # as the client wrote it, not a copy
    assert req.native.headers == {"anthropic-beta": "files-api-2025-04-14"}
    assert "thinking" not in req.body and req.body["messages"][0]["content"] == "Rules."


REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "no max_tokens": ({"model": "fast", "messages": USER}, "'max_tokens' is a required property"),
    "no messages": ({"model": "fast", "max_tokens": 5}, "'messages' is a required property"),
    "zero max_tokens": (body(max_tokens=0), "max_tokens: 0 is less than the minimum of 1"),
    "temperature past 1": (body(temperature=1.5), "temperature: 1.5 is greater than the maximum"),
    "empty messages": (body(messages=[]), "messages: [] should be non-empty"),
    "a system role in messages": (
        body(messages=[{"role": "system", "content": "x"}]), "messages.0.role: 'system' is not one of"),
    "a text block without text": (
        body(messages=[{"role": "user", "content": [{"type": "text"}]}]),
        "messages.0.content.0: 'text' is a required property"),
    "a document block without a source type": (
        body(messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}]),
        "messages.0.content.0.source: 'type' is a required property"),
    "a PDF document block": (
        body(messages=[{"role": "user", "content": [{"type": "document", "source": {
            "type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]}]),
        "messages.0.content.0: content blocks of type 'document' are not supported by this "
        "gateway (a 'base64' source cannot be counted"),
    "a tool_use block from the user": (
        body(messages=[{"role": "user", "content": [
            {"type": "tool_use", "id": "t", "name": "n", "input": {}}]}]),
        "content blocks of type 'tool_use' are not supported"),
    "an image inside a tool_result": (
        body(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                     "content": [{"type": "image", "source": PNG}]}]}]),
        "messages.0.content.0.content.0: content blocks of type 'image'"),
    "an image from the assistant": (
        body(messages=[{"role": "assistant", "content": [{"type": "image", "source": PNG}]}]),
        "messages.0.content.0: content blocks of type 'image' are not supported"),
    "an image in the system prompt": (
        body(system=[{"type": "image", "source": PNG}]),
        "system.0: content blocks of type 'image' are not supported"),
    "a tool_use block in the system prompt": (
        body(system=[{"type": "text", "text": "x"},
                     {"type": "tool_use", "id": "t", "name": "n", "input": {}}]),
        "system.1: content blocks of type 'tool_use' are not supported"),
    "a server tool": (body(tools=[{"type": "bash_20250124", "name": "bash"}]),
                      "tools.0: tools of type 'bash_20250124' are not supported"),
    "a custom tool without input_schema": (
        body(tools=[{"name": "now"}]), "tools.0: 'input_schema' is a required property"),
    "tool_choice naming no tool": (
        body(tools=[WEATHER], tool_choice={"type": "tool", "name": "nope"}),
        "tool_choice.name: no tool named 'nope' in tools."),
    "tool_choice tool without a name": (
        body(tools=[WEATHER], tool_choice={"type": "tool"}),
        "tool_choice: 'name' is a required property"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_malformed_requests_are_refused_naming_the_field(case: str) -> None:
    anthropic_body, message = REFUSED[case]
    with pytest.raises(errors.InvalidRequest) as refused:
        messages_request(anthropic_body, {})
    assert message in refused.value.message
    status, raw = render_error(refused.value)
    assert status == 400
    assert orjson.loads(raw) == {"type": "error", "error": {
        "type": "invalid_request_error", "message": refused.value.message}}


ERRORS = [
    (errors.InvalidRequest("x"), 400, "invalid_request_error"),
    (errors.MalformedJSON("x"), 400, "invalid_request_error"),
    (errors.AuthenticationFailed("x"), 401, "authentication_error"),
    (errors.PermissionDenied("x"), 403, "permission_error"),
    (errors.ModelNotFound("claude-nope"), 404, "not_found_error"),
    (errors.MethodNotAllowed("x"), 405, "invalid_request_error"),
    (errors.RequestTimeout("x"), 408, "invalid_request_error"),
    (errors.PayloadTooLarge("x"), 413, "request_too_large"),
    (errors.RateLimited("x"), 429, "rate_limit_error"),
    (errors.UpstreamRateLimited("x", retry_after_s=2), 429, "rate_limit_error"),
    (errors.QuotaExceeded("x"), 429, "rate_limit_error"),
    (errors.GatewayError("x"), 500, "api_error"),
    (errors.UpstreamError("x"), 502, "api_error"),
    (errors.UpstreamTooLong("x"), 502, "api_error"),
    (errors.UpstreamRejected("x", status_code=422), 422, "invalid_request_error"),
    (errors.UpstreamRejected("x", status_code=404), 404, "not_found_error"),
    (errors.ServiceUnavailable("x"), 529, "overloaded_error"),
    (errors.UpstreamSaturated("x"), 529, "overloaded_error"),
    (errors.UpstreamTimeout("x"), 504, "timeout_error"),
]


@pytest.mark.parametrize(("exc", "status", "kind"), ERRORS,
                         ids=[f"{type(e).__name__}-{s}" for e, s, _ in ERRORS])
def test_every_gateway_error_has_anthropics_type_and_status(
        exc: errors.GatewayError, status: int, kind: str) -> None:
    got_status, raw = render_error(exc)
    assert (got_status, orjson.loads(raw)["error"]["type"]) == (status, kind)
    if kind != "request_too_large":
        # The SDK's own model of an error body accepts it. (Anthropic's 413 comes
        # from its CDN, before its API: the errors page lists it, the SDK's types do not.)
        anthropic.types.ErrorResponse.model_validate({**orjson.loads(raw), "request_id": None})


def completion(message: dict[str, Any], finish: str | None, **choice: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "gemma-3-270m",
            "choices": [{"index": 0, "message": {"role": "assistant", **message},
                         "finish_reason": finish, **choice}],
            "usage": {"prompt_tokens": 999, "completion_tokens": 999}}


CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
ANSWERS = {
    "text, end_turn": (completion({"content": "Hello!"}, "stop"),
                       [{"type": "text", "text": "Hello!"}], "end_turn", None),
    "cut at max_tokens": (completion({"content": "Once upon"}, "length"),
                          [{"type": "text", "text": "Once upon"}], "max_tokens", None),
    "a stop sequence the upstream names": (
        completion({"content": "1, 2"}, "stop", stop_reason="END"),
        [{"type": "text", "text": "1, 2"}], "stop_sequence", "END"),
    "a stop string the client did not ask for": (
        completion({"content": "1, 2"}, "stop", stop_reason="<eos>"),
        [{"type": "text", "text": "1, 2"}], "end_turn", None),
    "a tool call": (
        completion({"content": None, "tool_calls": [CALL]}, "tool_calls"),
        [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}],
        "tool_use", None),
    "text and a tool call that finished 'stop'": (
        completion({"content": "Let me look.", "tool_calls": [CALL]}, "stop"),
        [{"type": "text", "text": "Let me look."},
         {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}],
        "tool_use", None),
    "tool arguments that are not JSON are kept": (
        completion({"content": None, "tool_calls": [
            {**CALL, "function": {"name": "get_weather", "arguments": '{"city": "Par'}}]},
            "tool_calls"),
        [{"type": "tool_use", "id": "call_1", "name": "get_weather",
          "input": {RAW_ARGUMENTS: '{"city": "Par'}}], "tool_use", None),
    "empty arguments are an empty input": (
        completion({"content": None, "tool_calls": [
            {**CALL, "function": {"name": "now", "arguments": ""}}]}, "tool_calls"),
        [{"type": "tool_use", "id": "call_1", "name": "now", "input": {}}], "tool_use", None),
    "OpenAI's refusal": (
        completion({"content": None, "refusal": "I can't help with that."}, "stop"),
        [{"type": "text", "text": "I can't help with that."}], "refusal", None),
    "a content filter": (completion({"content": ""}, "content_filter"), [], "refusal", None),
}


@pytest.mark.parametrize("case", ANSWERS)
def test_an_answer_becomes_an_anthropic_message(case: str) -> None:
    data, content, reason, sequence = ANSWERS[case]
    message = to_message(data, Usage(12, 7), MessagesWire("fast", ("END",)), "msg_1")
    assert message == {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "gemma-3-270m",
        "content": content, "stop_reason": reason, "stop_sequence": sequence,
        # the billed figures, never the upstream's 999s
        "usage": {"input_tokens": 12, "output_tokens": 7, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0,
                  "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                     "ephemeral_1h_input_tokens": 0}}}
    parsed = anthropic.types.Message.model_validate(message)
    assert parsed.stop_reason == reason
    assert parsed.usage.cache_creation is not None

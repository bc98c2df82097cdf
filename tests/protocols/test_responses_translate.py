"""The Responses request → chat body translation, table by table (pure: no network).

Each part is read as the door reads it (``model.read_request``), then translated."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import InvalidRequest
from gateway.protocols.chat_body import chat_request
from gateway.protocols.openai_responses import items, tools
from gateway.protocols.openai_responses.model import ResponsesRequest, read_request
from gateway.protocols.openai_responses.parse import translate

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def chat_of(body: dict[str, Any], history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    chat, _ = translate(read_request(body), body, history or [], response_id="resp_abc", created_at=1)
    return chat


def typed(**fields: Any) -> ResponsesRequest:
    return read_request({"model": "m", **fields})


def chat_messages(value: Any) -> list[dict[str, Any]]:
    read = typed(input=value).input
    assert read is not None
    return items.chat_messages(read)


def chat_tools(value: Any) -> Any:
    return tools.chat_tools(typed(tools=value).tools)


def chat_tool_choice(value: Any) -> Any:
    return tools.chat_tool_choice(typed(tool_choice=value).tool_choice)


def response_format(value: Any) -> Any:
    return tools.response_format(typed(text=value).text)


INPUTS = [
    ("a string", "Hello", [{"role": "user", "content": "Hello"}]),
    ("easy messages", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],
     [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]),
    ("typed parts", [{"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
                     {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                      "content": [{"type": "output_text", "text": "c", "annotations": []}]}],
     [{"role": "user", "content": "ab"}, {"role": "assistant", "content": "c"}]),
    ("developer is system", [{"role": "developer", "content": "rules"}],
     [{"role": "system", "content": "rules"}]),
    ("an image", [{"role": "user", "content": [
        {"type": "input_text", "text": "what?"},
        {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "low"}]}],
     [{"role": "user", "content": [
         {"type": "text", "text": "what?"},
         {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA", "detail": "low"}}]}]),
    ("a tool loop", [
        {"role": "user", "content": "weather in Paris?"},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
         "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
     [{"role": "user", "content": "weather in Paris?"},
      {"role": "assistant", "content": None, "tool_calls": [
          {"id": "call_1", "type": "function",
           "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]),
    ("parallel calls join the turn's text", [
        {"role": "assistant", "content": "Let me look."},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": [{"type": "input_text", "text": "1"}]},
        {"type": "function_call_output", "call_id": "b", "output": "2"}],
     [{"role": "assistant", "content": "Let me look.", "tool_calls": [
         {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
         {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "a", "content": "1"},
      {"role": "tool", "tool_call_id": "b", "content": "2"}]),
    ("reasoning items are dropped", [
        {"type": "reasoning", "id": "rs_1", "summary": []}, {"role": "user", "content": "x"}],
     [{"role": "user", "content": "x"}]),
]


@pytest.mark.parametrize(("case", "value", "expected"), INPUTS, ids=[c[0] for c in INPUTS])
def test_input_items_become_chat_messages(case: str, value: Any, expected: list) -> None:
    assert chat_messages(value) == expected


BAD_INPUTS = [
    ("not a list", 42, "input"),
    ("an item not an object", ["hi"], "input[0]"),
    ("an unknown role", [{"role": "critic", "content": "x"}], "input[0].role"),
    ("a role that is a list", [{"role": ["user"], "content": "x"}], "input[0].role"),
    ("a hosted item", [{"type": "web_search_call", "id": "ws_1"}], "input[0].type"),
    ("an item reference", [{"type": "item_reference", "id": "msg_1"}], "input[0].type"),
    ("a file part", [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}],
     "input[0].content[0].type"),
    ("an image by file id", [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}],
     "input[0].content[0].image_url"),
    ("a call without call_id", [{"type": "function_call", "name": "f", "arguments": "{}"}],
     "input[0].call_id"),
    ("an output without call_id", [{"type": "function_call_output", "output": "x"}], "input[0].call_id"),
    ("a message without content", [{"role": "user"}], "input[0].content"),
]


@pytest.mark.parametrize(("case", "value", "param"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_items_are_refused_naming_the_field(case: str, value: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        chat_messages(value)
    assert caught.value.param == param


def test_a_whole_request_becomes_one_chat_body() -> None:
    body = {"model": "fast", "instructions": "Be brief.", "input": "Weather in Paris?",
            "tools": [{"type": "function", "name": "get_weather", "description": "Weather now",
                       "parameters": WEATHER, "strict": True}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False, "max_output_tokens": 50, "temperature": 0.2,
            "top_p": 0.9, "user": "u1", "stream": True, "metadata": {"k": "v"},
            "include": [], "truncation": "disabled", "store": False}
    chat, wire = translate(read_request(body), body, [], response_id="resp_abc", created_at=7)
    assert chat == {
        "model": "fast",
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER,
                                                    "description": "Weather now", "strict": True}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False, "max_tokens": 50, "temperature": 0.2, "top_p": 0.9,
        "user": "u1", "stream": True}
    # The stored conversation never carries the instructions (OpenAI does not carry them over).
    assert wire.conversation == [{"role": "user", "content": "Weather in Paris?"}]
    assert wire.store is False and wire.echo["metadata"] == {"k": "v"}
    assert wire.echo["tools"] == [{"type": "function", "name": "get_weather",
                                   "description": "Weather now", "parameters": WEATHER,
                                   "strict": True}]
    # What the chat door checks, it accepts: the pipeline sees an ordinary chat request.
    req = chat_request(chat, {})
    assert req.has_tools and req.max_tokens == 50 and req.stream and not req.has_response_format


def test_history_comes_after_the_instructions_and_before_the_input() -> None:
    history = [{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}]
    body = {"model": "m", "instructions": "sys", "input": "3"}
    chat, wire = translate(read_request(body), body, history, response_id="resp_x", created_at=1)
    assert [m["content"] for m in chat["messages"]] == ["sys", "1", "2", "3"]
    assert [m["content"] for m in wire.conversation] == ["1", "2", "3"]
    # Chaining with no new input continues the stored conversation as it is.
    assert chat_of({"model": "m"}, history)["messages"] == history


FORMATS = [
    ("absent", None, None),
    ("text", {"format": {"type": "text"}}, None),
    ("json_object", {"format": {"type": "json_object"}}, {"type": "json_object"}),
    ("json_schema", {"format": {"type": "json_schema", "name": "w", "schema": WEATHER, "strict": True}},
     {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER, "strict": True}}),
    ("json_schema, described", {"format": {"type": "json_schema", "name": "w", "schema": WEATHER,
                                           "description": "d"}, "verbosity": "low"},
     {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER, "description": "d"}}),
]


@pytest.mark.parametrize(("case", "text", "expected"), FORMATS, ids=[c[0] for c in FORMATS])
def test_text_format_becomes_response_format(case: str, text: Any, expected: Any) -> None:
    assert response_format(text) == expected
    assert chat_of({"model": "m", "input": "x", **({"text": text} if text else {})}).get(
        "response_format") == expected


CHOICES = [
    ("auto", "auto", "auto"), ("none", "none", "none"), ("required", "required", "required"),
    ("by name", {"type": "function", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
    ("allowed tools", {"type": "allowed_tools", "mode": "required",
                       "tools": [{"type": "function", "name": "f"}]},
     {"type": "allowed_tools", "allowed_tools": {
         "mode": "required", "tools": [{"type": "function", "function": {"name": "f"}}]}}),
]


@pytest.mark.parametrize(("case", "choice", "expected"), CHOICES, ids=[c[0] for c in CHOICES])
def test_tool_choice_becomes_the_chat_one(case: str, choice: Any, expected: Any) -> None:
    assert chat_tool_choice(choice) == expected


BUILT_IN = ["web_search", "web_search_preview", "file_search", "code_interpreter",
            "computer_use_preview", "image_generation", "mcp", "local_shell", "custom"]


@pytest.mark.parametrize("kind", BUILT_IN)
def test_hosted_tools_are_a_400_naming_the_tool(kind: str) -> None:
    tools = [{"type": "function", "name": "f", "parameters": WEATHER}, {"type": kind}]
    with pytest.raises(InvalidRequest) as caught:
        chat_tools(tools)
    assert caught.value.param == "tools[1].type" and caught.value.status_code == 400
    assert repr(kind) in caught.value.message


BAD_BODIES = [
    ("unknown parameter", {"frobnicate": 1}, "frobnicate", "unknown_parameter"),
    ("conversation", {"conversation": "conv_1"}, "conversation", "unsupported_parameter"),
    ("background", {"background": True}, "background", "unsupported_parameter"),
    ("max_output_tokens zero", {"max_output_tokens": 0}, "max_output_tokens", "invalid_value"),
    ("temperature a string", {"temperature": "hot"}, "temperature", "invalid_value"),
    ("store not a boolean", {"store": "yes"}, "store", "invalid_value"),
    ("17 metadata keys", {"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "invalid_value"),
    ("a 65-char metadata key", {"metadata": {"k" * 65: "v"}}, "metadata." + "k" * 64, "invalid_value"),
    ("a 513-char metadata value", {"metadata": {"k": "v" * 513}}, "metadata.k", "invalid_value"),
    ("a number as metadata value", {"metadata": {"k": 1}}, "metadata.k", "invalid_value"),
    ("no input", {"input": None}, "input", "missing_required_parameter"),
    ("an empty input", {"input": []}, "input", "invalid_value"),
    ("a nameless tool", {"tools": [{"type": "function", "parameters": WEATHER}]}, "tools[0].name",
     "missing_required_parameter"),
    ("a hosted tool_choice", {"tool_choice": {"type": "web_search_preview"}}, "tool_choice",
     "invalid_value"),
    ("an unknown format", {"text": {"format": {"type": "yaml"}}}, "text.format.type", "invalid_value"),
    ("a nameless schema", {"text": {"format": {"type": "json_schema", "schema": WEATHER}}},
     "text.format.name", "missing_required_parameter"),
]


@pytest.mark.parametrize(("case", "extra", "param", "code"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
def test_bad_requests_are_400s_naming_the_parameter(case: str, extra: dict, param: str,
                                                    code: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        chat_of({"model": "m", "input": "x", **extra})
    assert (caught.value.param, caught.value.code) == (param, code)


def test_metadata_at_openais_bounds_is_kept() -> None:
    metadata = {f"{i:0>64}": "v" * 512 for i in range(16)}
    body = {"model": "m", "input": "x", "metadata": metadata}
    _, wire = translate(read_request(body), body, [], response_id="resp_x", created_at=1)
    assert wire.echo["metadata"] == metadata

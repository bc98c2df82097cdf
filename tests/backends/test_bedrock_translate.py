"""OpenAI chat -> Bedrock Converse: a table of named cases, input to output, no server."""

from __future__ import annotations

from typing import Any

import pytest

from backends.bedrock.translate import to_converse
from core.errors import InvalidRequest

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
WEATHER: Any = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
WEATHER_SPEC = {"toolSpec": {"name": "get_weather", "description": "The weather in a city.",
                             "inputSchema": {"json": WEATHER["function"]["parameters"]}}}
USER: Any = {"role": "user", "content": "Weather in Paris?"}
CALL: Any = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
RESULT: Any = {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"}
INFERENCE = {"maxTokens": 256}


def user_turn(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("system and user text",
     {"messages": [{"role": "system", "content": "Be brief."}, USER]},
     {"system": [{"text": "Be brief."}], "messages": [user_turn({"text": "Weather in Paris?"})],
      "inferenceConfig": INFERENCE}),
    ("neighbouring user messages merge into one turn, developer joins system",
     {"messages": [{"role": "developer", "content": "Rules."}, USER,
                   {"role": "user", "content": [{"type": "text", "text": "And Rome?"}]}]},
     {"system": [{"text": "Rules."}],
      "messages": [user_turn({"text": "Weather in Paris?"}, {"text": "And Rome?"})],
      "inferenceConfig": INFERENCE}),
    ("blank text is left out, an empty assistant turn with it",
     {"messages": [USER, {"role": "assistant", "content": "  "},
                   {"role": "user", "content": [{"type": "text", "text": ""},
                                                {"type": "text", "text": "Hi"}]}]},
     {"messages": [user_turn({"text": "Weather in Paris?"}, {"text": "Hi"})],
      "inferenceConfig": INFERENCE}),
    ("a data: URL image becomes image bytes",
     {"messages": [{"role": "user", "content": [
         {"type": "text", "text": "What is this?"},
         {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}]},
     {"messages": [user_turn({"text": "What is this?"},
                             {"image": {"format": "png", "source": {"bytes": PNG}}})],
      "inferenceConfig": INFERENCE}),
    ("a tool call and its result pair by id; the result is a user turn",
     {"messages": [USER, CALL, RESULT, {"role": "user", "content": "Thanks"}],
      "tools": [WEATHER]},
     {"messages": [
         user_turn({"text": "Weather in Paris?"}),
         {"role": "assistant", "content": [{"toolUse": {
             "toolUseId": "call_1", "name": "get_weather", "input": {"city": "Paris"}}}]},
         user_turn({"toolResult": {"toolUseId": "call_1",
                                   "content": [{"text": "18C and sunny"}]}}, {"text": "Thanks"})],
      "toolConfig": {"tools": [WEATHER_SPEC], "toolChoice": {"auto": {}}},
      "inferenceConfig": INFERENCE}),
    ("tool_choice required is any",
     {"messages": [USER], "tools": [WEATHER], "tool_choice": "required"},
     {"messages": [user_turn({"text": "Weather in Paris?"})],
      "toolConfig": {"tools": [WEATHER_SPEC], "toolChoice": {"any": {}}},
      "inferenceConfig": INFERENCE}),
    ("a named tool_choice is tool",
     {"messages": [USER], "tools": [WEATHER],
      "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
     {"messages": [user_turn({"text": "Weather in Paris?"})],
      "toolConfig": {"tools": [WEATHER_SPEC], "toolChoice": {"tool": {"name": "get_weather"}}},
      "inferenceConfig": INFERENCE}),
    ("tool_choice none drops the tools (Converse has no none)",
     {"messages": [USER], "tools": [WEATHER], "tool_choice": "none"},
     {"messages": [user_turn({"text": "Weather in Paris?"})], "inferenceConfig": INFERENCE}),
    ("tool_choice none keeps the tools, without a choice, when tool blocks need them",
     {"messages": [USER, CALL, RESULT], "tools": [WEATHER], "tool_choice": "none"},
     {"messages": [
         user_turn({"text": "Weather in Paris?"}),
         {"role": "assistant", "content": [{"toolUse": {
             "toolUseId": "call_1", "name": "get_weather", "input": {"city": "Paris"}}}]},
         user_turn({"toolResult": {"toolUseId": "call_1", "content": [{"text": "18C and sunny"}]}})],
      "toolConfig": {"tools": [WEATHER_SPEC]}, "inferenceConfig": INFERENCE}),
    ("response_format json_schema is a forced tool of the schema's name",
     {"messages": [USER], "response_format": {"type": "json_schema", "json_schema": {
         "name": "forecast", "schema": {"type": "object", "properties": {
             "celsius": {"type": "number"}}}}}},
     {"messages": [user_turn({"text": "Weather in Paris?"})],
      "toolConfig": {"tools": [{"toolSpec": {"name": "forecast", "inputSchema": {"json": {
          "type": "object", "properties": {"celsius": {"type": "number"}}}}}}],
          "toolChoice": {"tool": {"name": "forecast"}}},
      "inferenceConfig": INFERENCE}),
    ("the output cap, temperature, top_p and stop go in inferenceConfig",
     {"messages": [USER], "max_completion_tokens": 64, "temperature": 0.2, "top_p": 0.9,
      "stop": "END"},
     {"messages": [user_turn({"text": "Weather in Paris?"})],
      "inferenceConfig": {"maxTokens": 64, "temperature": 0.2, "topP": 0.9,
                          "stopSequences": ["END"]}}),
    ("cache_control on a part puts a cache point after its block",
     {"messages": [{"role": "system", "content": [
         {"type": "text", "text": "Long rules.", "cache_control": {"type": "ephemeral"}}]}, USER]},
     {"system": [{"text": "Long rules."}, {"cachePoint": {"type": "default"}}],
      "messages": [user_turn({"text": "Weather in Paris?"})], "inferenceConfig": INFERENCE}),
    ("a tool call id outside Converse's pattern is rewritten alike in call and result",
     {"messages": [USER, {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": "call#1 x"}]},
                   {**RESULT, "tool_call_id": "call#1 x"}], "tools": [WEATHER]},
     {"messages": [
         user_turn({"text": "Weather in Paris?"}),
         {"role": "assistant", "content": [{"toolUse": {
             "toolUseId": "call_1_x", "name": "get_weather", "input": {"city": "Paris"}}}]},
         user_turn({"toolResult": {"toolUseId": "call_1_x",
                                   "content": [{"text": "18C and sunny"}]}})],
      "toolConfig": {"tools": [WEATHER_SPEC], "toolChoice": {"auto": {}}},
      "inferenceConfig": INFERENCE}),
]

REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("an image by URL", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]},
     "messages[0].content[0]"),
    ("temperature above 1", {"messages": [USER], "temperature": 1.5}, "temperature"),
    ("several choices", {"messages": [USER], "n": 2}, "n"),
    ("a conversation that starts with the assistant",
     {"messages": [{"role": "assistant", "content": "Hi"}, USER]}, "messages"),
    ("tool arguments that are not an object",
     {"messages": [USER, {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "function": {
         "name": "get_weather", "arguments": "[1]"}}]}]},
     "messages[1].tool_calls[0].function.arguments"),
    ("response_format together with tools",
     {"messages": [USER], "tools": [WEATHER], "response_format": {"type": "json_object"}},
     "response_format"),
    ("a tool_choice naming no tool",
     {"messages": [USER], "tools": [WEATHER],
      "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
]


@pytest.mark.parametrize("name, payload, expected", CASES, ids=[c[0] for c in CASES])
def test_chat_to_converse(name: str, payload: dict[str, Any], expected: dict[str, Any]) -> None:
    assert to_converse(payload, max_output_tokens=256).body == expected


@pytest.mark.parametrize("name, payload, param", REFUSED, ids=[c[0] for c in REFUSED])
def test_what_converse_cannot_carry_is_a_400(name: str, payload: dict[str, Any],
                                             param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        to_converse(payload, max_output_tokens=256)
    assert refused.value.status_code == 400 and refused.value.param == param
    assert "Amazon Bedrock" in refused.value.message


def test_the_structured_tool_is_named_for_the_reply() -> None:
    request = to_converse({"messages": [USER], "response_format": {"type": "json_object"}}, 10)
    assert request.structured == "json_answer"
    assert request.body["toolConfig"]["toolChoice"] == {"tool": {"name": "json_answer"}}

"""The Responses door's translations as tables of named cases, no server.

Requests in (a whole ``/v1/responses`` body -> the chat body the pipeline serves, read as
the door reads it: ``model.read_request`` then ``parse.translate``), and answers out (a
chat completion -> the response object's output items and status, checked by the SDK's
own ``Response`` model). ``test_responses_translate.py`` tables the parts one by one.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response

from core.usage import Usage
from gateway.protocols.openai_responses.model import read_request
from gateway.protocols.openai_responses.parse import ResponsesWire, translate
from gateway.protocols.openai_responses.render import completed_response

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "name": "weather", "parameters": SCHEMA}
CHAT_TOOL = {"type": "function", "function": {"name": "weather", "parameters": SCHEMA}}
CALL = {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city":"Oslo"}'}
CHAT_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}
HI = {"role": "user", "content": "Hi"}


def chat(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "fast", "messages": list(messages or [HI]), **fields}


REQUESTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "a string input": ({"input": "Hi"}, chat()),
    "instructions lead as the system message": (
        {"instructions": "Be brief.", "input": "Hi"},
        chat({"role": "system", "content": "Be brief."}, HI)),
    "empty instructions are none": ({"instructions": "", "input": "Hi"}, chat()),
    "instructions as items": (
        {"instructions": [{"role": "developer", "content": "Rules."}], "input": "Hi"},
        chat({"role": "system", "content": "Rules."}, HI)),
    "text parts are joined": (
        {"input": [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "a"}, {"type": "text", "text": "b"}]}]},
        chat({"role": "user", "content": "ab"})),
    "an assistant's refusal part is its text": (
        {"input": [HI, {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}]},
        chat(HI, {"role": "assistant", "content": "No."})),
    "a call, then its output": (
        {"input": [HI, CALL, {"type": "function_call_output", "call_id": "call_1", "output": "7C"}],
         "tools": [TOOL]},
        chat(HI, {"role": "assistant", "content": None, "tool_calls": [CHAT_CALL]},
             {"role": "tool", "tool_call_id": "call_1", "content": "7C"}, tools=[CHAT_TOOL])),
    "a function tool without parameters takes an empty object": (
        {"input": "Hi", "tools": [{"type": "function", "name": "now", "description": "Time",
                                   "strict": False}]},
        chat(tools=[{"type": "function", "function": {
            "name": "now", "parameters": {"type": "object", "properties": {}},
            "description": "Time", "strict": False}}])),
    "tool_choice required with its tools": (
        {"input": "Hi", "tools": [TOOL], "tool_choice": "required", "parallel_tool_calls": False},
        chat(tools=[CHAT_TOOL], tool_choice="required", parallel_tool_calls=False)),
    "tool_choice and parallel calls mean nothing without tools": (
        {"input": "Hi", "tool_choice": "none", "parallel_tool_calls": True}, chat()),
    "allowed tools by name": (
        {"input": "Hi", "tools": [TOOL], "tool_choice": {
            "type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "weather"}]}},
        chat(tools=[CHAT_TOOL], tool_choice={"type": "allowed_tools", "allowed_tools": {
            "mode": "auto", "tools": [{"type": "function", "function": {"name": "weather"}}]}})),
    "json_object format": (
        {"input": "Hi", "text": {"format": {"type": "json_object"}}},
        chat(response_format={"type": "json_object"})),
    "json_schema format": (
        {"input": "Hi", "text": {"format": {"type": "json_schema", "name": "w", "schema": SCHEMA}}},
        chat(response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMA}})),
    "plain text format sends none": ({"input": "Hi", "text": {"format": {"type": "text"}}}, chat()),
    "sampling, caps, user and stream": (
        {"input": "Hi", "max_output_tokens": 40, "temperature": 0, "top_p": 0.5, "user": "u",
         "stream": True},
        chat(max_tokens=40, temperature=0, top_p=0.5, user="u", stream=True)),
    "ignored parameters and unset OpenAI state send nothing": (
        {"input": "Hi", "include": ["reasoning.encrypted_content"], "truncation": "auto",
         "reasoning": {"effort": "low"}, "service_tier": "auto", "prompt_cache_key": "k",
         "background": False, "conversation": None, "store": True, "metadata": {"a": "b"}},
        chat()),
    "null fields are absent ones": (
        {"input": "Hi", "instructions": None, "tools": None, "tool_choice": None, "text": None,
         "max_output_tokens": None, "temperature": None, "user": None, "stream": None},
        chat()),
}


@pytest.mark.parametrize("case", REQUESTS)
def test_a_responses_request_becomes_its_chat_body(case: str) -> None:
    body = {"model": "fast", **REQUESTS[case][0]}
    got, _ = translate(read_request(body), body, [], response_id="resp_t", created_at=1)
    assert got == REQUESTS[case][1]


WIRE = ResponsesWire(id="resp_abc", created_at=1, echo={}, conversation=[])


def answer(message: dict[str, Any], finish: str | None = "stop") -> dict[str, Any]:
    return {"model": "fast", "choices": [{"index": 0, "message": {"role": "assistant", **message},
                                          "finish_reason": finish}]}


def text_item(words: str, status: str = "completed") -> dict[str, Any]:
    return {"id": "msg_abc00", "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": words, "annotations": [], "logprobs": []}]}


def call_item(index: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"fc_abc{index:02d}", "type": "function_call", "status": "completed",
            "call_id": call_id, "name": name, "arguments": arguments}


ANSWERS = {
    "text": (answer({"content": "Hello."}), [text_item("Hello.")], "completed"),
    "cut at the cap": (answer({"content": "Once"}, "length"), [text_item("Once", "incomplete")],
                       "incomplete"),
    "a refusal is the message's text": (answer({"content": None, "refusal": "No."}),
                                        [text_item("No.")], "completed"),
    "one call": (answer({"content": None, "tool_calls": [CHAT_CALL]}, "tool_calls"),
                 [call_item(0, "call_1", "weather", '{"city":"Oslo"}')], "completed"),
    "text, then two calls": (
        answer({"content": "Looking.", "tool_calls": [
            CHAT_CALL, {"id": "call_2", "type": "function",
                        "function": {"name": "now", "arguments": "{}"}}]}, "tool_calls"),
        [text_item("Looking."), call_item(1, "call_1", "weather", '{"city":"Oslo"}'),
         call_item(2, "call_2", "now", "{}")], "completed"),
    "content as text parts": (answer({"content": [{"type": "text", "text": "a"},
                                                  {"type": "text", "text": "b"}]}),
                              [text_item("ab")], "completed"),
    "an empty answer is a message of empty text": (
        answer({"content": None}), [text_item("")], "completed"),
}


@pytest.mark.parametrize("case", ANSWERS)
def test_a_chat_answer_becomes_the_response_output(case: str) -> None:
    data, output, status = ANSWERS[case]
    response = completed_response(WIRE, data, Usage(9, 4), 2)
    assert (response["output"], response["status"]) == (output, status)
    assert response["usage"]["total_tokens"] == 13          # the billed figures
    Response.model_validate({**response, "tools": [], "tool_choice": "auto",
                             "parallel_tool_calls": True})

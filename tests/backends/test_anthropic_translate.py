"""``backend: anthropic``'s pure translations, table by table: no server.

Chat bodies in (-> the Messages request, checked field by field against
Anthropic's API reference, /work/notes/providers.md section 1), Messages
answers out (-> a chat.completion, parsed by the openai SDK's own type),
and the usage, whose cache counts are apart from ``input_tokens``.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from backends.anthropic_messages.from_wire import to_chat_completion, usage_of
from backends.anthropic_messages.to_wire import to_messages_body
from core.errors import InvalidRequest
from core.usage import MAX_REPORTED_TOKENS, Usage

MODEL, CAP = "claude-test", 4096
HI = {"role": "user", "content": "Hi"}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                              "parameters": SCHEMA}}
TOOL = {"name": "get_weather", "description": "Weather now", "input_schema": SCHEMA}


EPH, EPH_1H = {"type": "ephemeral"}, {"type": "ephemeral", "ttl": "1h"}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [HI], **fields}


def wire(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": CAP, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], **fields}


def text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


REQUESTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "plain, max_tokens defaults to the model's maximum": (chat(), wire()),
    "max_tokens is kept": (chat(max_tokens=64), wire(max_tokens=64)),
    "max_completion_tokens wins, at most the model's maximum": (
        chat(max_completion_tokens=99_999, max_tokens=10), wire(max_tokens=CAP)),
    "system and developer messages go to the top level, in order": (
        chat(messages=[{"role": "system", "content": "Be terse."}, HI,
                       {"role": "developer", "content": [text("Answer in French.")]}]),
        wire(system=[text("Be terse."), text("Answer in French.")])),
    "consecutive turns of one role are merged": (
        chat(messages=[HI, {"role": "user", "content": [text("And?")]},
                       {"role": "assistant", "content": "A"},
                       {"role": "assistant", "content": "B"}]),
        wire(messages=[{"role": "user", "content": [text("Hi"), text("And?")]},
                       {"role": "assistant", "content": [text("A"), text("B")]}])),
    "a data URL image is inlined, a web one goes by URL": (
        chat(messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg",
                                                "detail": "high"}},
            text("Same picture?")]}]),
        wire(messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
            text("Same picture?")]}])),
    "tools get input_schema": (chat(tools=[CHAT_TOOL]), wire(tools=[TOOL])),
    "a tool without parameters gets an empty object schema": (
        chat(tools=[{"type": "function", "function": {"name": "now"}}]),
        wire(tools=[{"name": "now", "input_schema": {"type": "object", "properties": {}}}])),
    "tool_choice auto": (chat(tools=[CHAT_TOOL], tool_choice="auto"),
                         wire(tools=[TOOL], tool_choice={"type": "auto"})),
    "tool_choice required is any": (chat(tools=[CHAT_TOOL], tool_choice="required"),
                                    wire(tools=[TOOL], tool_choice={"type": "any"})),
    "a named tool_choice is tool": (
        chat(tools=[CHAT_TOOL], tool_choice={"type": "function",
                                             "function": {"name": "get_weather"}}),
        wire(tools=[TOOL], tool_choice={"type": "tool", "name": "get_weather"})),
    "tool_choice none": (chat(tools=[CHAT_TOOL], tool_choice="none"),
                         wire(tools=[TOOL], tool_choice={"type": "none"})),
    "parallel_tool_calls false disables parallel tool use": (
        chat(tools=[CHAT_TOOL], parallel_tool_calls=False),
        wire(tools=[TOOL], tool_choice={"type": "auto", "disable_parallel_tool_use": True})),
    "tool calls become tool_use, tool messages tool_result blocks paired by id": (
        chat(messages=[HI, {"role": "assistant", "content": "", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "toolu_2", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
            {"role": "tool", "tool_call_id": "toolu_2", "content": [text("21C")]},
            {"role": "user", "content": "Warmer?"}], tools=[CHAT_TOOL]),
        wire(messages=[{"role": "user", "content": [text("Hi")]},
                       {"role": "assistant", "content": [
                           {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                            "input": {"city": "Paris"}},
                           {"type": "tool_use", "id": "toolu_2", "name": "get_weather",
                            "input": {"city": "Rome"}}]},
                       {"role": "user", "content": [
                           {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                           {"type": "tool_result", "tool_use_id": "toolu_2", "content": "21C"},
                           text("Warmer?")]}], tools=[TOOL])),
    "stop becomes stop_sequences, blank ones dropped": (
        chat(stop=["END", "  ", "\n\nHuman:"]), wire(stop_sequences=["END", "\n\nHuman:"])),
    "a single stop string": (chat(stop="END"), wire(stop_sequences=["END"])),
    "response_format json_schema is output_config.format": (
        chat(response_format={"type": "json_schema",
                               "json_schema": {"name": "w", "strict": True, "schema": SCHEMA}}),
        wire(output_config={"format": {"type": "json_schema", "schema": SCHEMA}})),
    "temperature is clamped to Anthropic's 0..1, top_p kept": (
        chat(temperature=1.7, top_p=0.9), wire(temperature=1.0, top_p=0.9)),
    "user is metadata.user_id, stream kept": (
        chat(user="u-42", stream=True, stream_options={"include_usage": True}),
        wire(metadata={"user_id": "u-42"}, stream=True)),
    "fields with no counterpart are dropped": (
        chat(n=1, logprobs=True, top_logprobs=3, seed=7, presence_penalty=0.5,
             frequency_penalty=0.1, logit_bias={"1": 2}, response_format={"type": "json_object"},
             reasoning_effort="low", metadata={"k": "v"}, store=False),
        wire()),
    "an assistant refusal part and empty text": (
        chat(messages=[HI, {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."},
                                                             text("")]},
                       {"role": "user", "content": "Why?"}]),
        wire(messages=[{"role": "user", "content": [text("Hi")]},
                       {"role": "assistant", "content": [text("No.")]},
                       {"role": "user", "content": [text("Why?")]}])),
    "cache_control breakpoints go on their blocks, tools and tool results (LiteLLM's form)": (
        chat(messages=[
            {"role": "system", "content": [text("Rules."), {**text("More."), "cache_control": EPH}]},
            {"role": "user", "content": [{**text("Hi"), "cache_control": EPH_1H}]},
            {"role": "assistant", "tool_calls": [{"id": "t1", "type": "function",
                                                  "function": {"name": "get_weather",
                                                               "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t1",
             "content": [{**text("Sunny."), "cache_control": EPH}]}],
             tools=[{**CHAT_TOOL, "cache_control": EPH}]),
        wire(system=[{**text("Rules.\nMore."), "cache_control": EPH}],
             messages=[{"role": "user", "content": [{**text("Hi"), "cache_control": EPH_1H}]},
                       {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
                                                          "name": "get_weather", "input": {}}]},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                     "content": "Sunny.", "cache_control": EPH}]}],
             tools=[{**TOOL, "cache_control": EPH}])),
}


@pytest.mark.parametrize("case", REQUESTS)
def test_a_chat_body_becomes_the_messages_request(case: str) -> None:
    body, expected = REQUESTS[case]
    assert to_messages_body(body, model=MODEL, max_output_tokens=CAP) == expected


def test_sampling_is_left_out_for_an_api_version_that_refuses_it() -> None:
    body = to_messages_body(chat(temperature=0.2, top_p=0.5), model=MODEL, max_output_tokens=CAP,
                            sampling=False)
    assert body == wire()


REFUSED = {
    "n above 1": (chat(n=2), "n: one answer per request only"),
    "a tiff data URL": (
        chat(messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AAAA"}}]}]),
        "images of type 'image/tiff' are not taken"),
    "an empty user message": (chat(messages=[{"role": "user", "content": ""}]),
                              "messages[0].content: a message must have non-empty content"),
    "only a system message": (chat(messages=[{"role": "system", "content": "x"}]),
                              "at least one user or assistant message"),
    "arguments that are not an object": (
        chat(messages=[HI, {"role": "assistant", "tool_calls": [
            {"id": "t", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}]),
        "messages[1].tool_calls[0].function.arguments: a tool call's arguments must be a JSON"),
    "a cache_control that is not an object": (
        chat(messages=[{"role": "user", "content": [{**text("Hi"), "cache_control": "yes"}]}]),
        "messages[0].content[0].cache_control: cache_control is an object with a type"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_no_block_can_carry_is_a_400_naming_the_field(case: str) -> None:
    body, message = REFUSED[case]
    with pytest.raises(InvalidRequest) as refused:
        to_messages_body(body, model=MODEL, max_output_tokens=CAP)
    assert message in refused.value.message
    assert refused.value.status_code == 400


def answer(content: list[dict[str, Any]], stop: str, **usage: int) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5, **usage}}


ANSWERS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "text, end_turn is stop": (
        answer([text("Hello"), text(" there")], "end_turn"),
        {"role": "assistant", "content": "Hello there"}, "stop"),
    "stop_sequence is stop": (answer([text("A")], "stop_sequence"),
                              {"role": "assistant", "content": "A"}, "stop"),
    "max_tokens is length": (answer([text("Trunc")], "max_tokens"),
                             {"role": "assistant", "content": "Trunc"}, "length"),
    "tool_use is tool_calls, input as JSON arguments": (
        answer([text("Checking."), {"type": "tool_use", "id": "toolu_9", "name": "get_weather",
                                    "input": {"city": "Paris"}}], "tool_use"),
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "toolu_9", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        "tool_calls"),
    "thinking is reasoning_content, a signature is not": (
        answer([{"type": "thinking", "thinking": "Hmm.", "signature": "sig"}, text("42")],
               "end_turn"),
        {"role": "assistant", "content": "42", "reasoning_content": "Hmm."}, "stop"),
    "refusal is content_filter": (answer([], "refusal"), {"role": "assistant", "content": None},
                                  "content_filter"),
    "an unknown stop_reason is stop": (answer([text("x")], "brand_new_reason"),
                                       {"role": "assistant", "content": "x"}, "stop"),
}


@pytest.mark.parametrize("case", ANSWERS)
def test_a_messages_answer_becomes_a_chat_completion(case: str) -> None:
    data, message, finish = ANSWERS[case]
    chat_answer = to_chat_completion(data, model="claude-configured", created=1_700_000_000)
    assert chat_answer["choices"][0]["message"] == message
    assert chat_answer["choices"][0]["finish_reason"] == finish
    assert chat_answer["model"] == "claude-configured"
    ChatCompletion.model_validate(chat_answer)          # the openai SDK's own type


def test_usage_adds_the_cache_to_the_prompt_and_keeps_reads_and_writes_apart() -> None:
    data = answer([text("x")], "end_turn", cache_read_input_tokens=2000,
                  cache_creation_input_tokens=300)
    assert usage_of(data["usage"]) == Usage(2310, 5, cached_tokens=2000, cache_write_tokens=300)
    usage = to_chat_completion(data, model="m", created=0)["usage"]
    assert usage == {"prompt_tokens": 2310, "completion_tokens": 5, "total_tokens": 2315,
                     "prompt_tokens_details": {"cached_tokens": 2000,
                                               "cache_write_tokens": 300}}
    assert usage_of(data["usage"]).uncached_tokens == 10    # type: ignore[union-attr]


@pytest.mark.parametrize("usage", [
    {"input_tokens": -1, "output_tokens": 5},
    {"input_tokens": 1.5, "output_tokens": 5},
    {"input_tokens": True, "output_tokens": 5},
    {"input_tokens": 3},
    "not an object",
])
def test_usage_the_upstream_made_up_is_unreadable(usage: Any) -> None:
    assert usage_of(usage) is None


def test_a_made_up_cache_count_is_zero_and_flagged_the_rest_read() -> None:
    assert usage_of({"input_tokens": 3, "output_tokens": 5, "cache_read_input_tokens": "many"}
                    ) == Usage(3, 5, cache_anomaly="unreadable")


def test_huge_counts_saturate() -> None:
    huge = usage_of({"input_tokens": 2**80, "output_tokens": 2**80,
                     "cache_read_input_tokens": 2**80})
    assert huge is not None
    assert huge.prompt_tokens == huge.completion_tokens == MAX_REPORTED_TOKENS
    assert huge.cached_tokens <= huge.prompt_tokens

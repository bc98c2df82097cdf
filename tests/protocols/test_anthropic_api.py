"""``POST /v1/messages`` end to end: the official ``anthropic`` SDK against a real gateway.

A real gateway and the real simulator on loopback (``tests/support.py``),
real Redis; the client is ``anthropic.Anthropic`` pointed at the gateway.
Spend is read back from ``GET /v1/usage`` and must equal, to the nano-dollar,
the price of the usage each message reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import orjson
import pytest
from anthropic.types import DocumentBlockParam, MessageParam, ToolParam

from budget.nanousd import cost_nanousd
from classifiers.length import counter_for
from classifiers.prompt import structured_tokens
from tests.support import (
    TEST_KEY,
    Gateway,
    base_config,
    clear_of_minute_turn,
    hashed,
    run_gateway,
)

MONEY_KEY, CAPPED_KEY, LIAR_KEY = "sk-anthropic-money", "sk-anthropic-capped", "sk-anthropic-liar"
COUNTER_KEY = "sk-anthropic-counter"
FAST_PRICE = (0.2, 0.4)          # base_config's "fast": input, output per Mtok
HELLO: list[MessageParam] = [{"role": "user", "content": "Say hello."}]
WEATHER: ToolParam = {"name": "get_weather", "description": "The weather in a city now.",
                      "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                       "required": ["city"]}}


@pytest.fixture(scope="module")
def gw(sim_url: str) -> Iterator[Gateway]:
    config = base_config(sim_url)
    # An upstream that reports 10,000,000 output tokens for every answer.
    config["models"].append({"name": "liar", "backend": "openai_compat", "base_url": sim_url,
                             "upstream_model": "huge-usage", "max_output_tokens": 1024,
                             "price": {"input_per_mtok": 0.2, "output_per_mtok": 0.4}})
    config["teams"] += [
        {"name": "money", "keys": [hashed(MONEY_KEY)]},
        {"name": "liar", "keys": [hashed(LIAR_KEY)]},
        # fast's ceiling at max_tokens=50 is ~$0.00002: a few answers, then refused
        {"name": "capped", "keys": [hashed(CAPPED_KEY)], "budget": {"daily_hard_usd": 0.00008}},
        {"name": "counter", "keys": [hashed(COUNTER_KEY)], "budget": {"rpm": 10}},
    ]
    with run_gateway(config) as gateway:
        yield gateway


def sdk(gw: Gateway, key: str = TEST_KEY, **kw: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0, timeout=30, **kw)


def spent(gw: Gateway, key: str) -> int:
    reply = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {key}"})
    assert reply.status_code == 200, reply.text
    return int(reply.json()["spent_today_nanousd"])


def text_of(message: anthropic.types.Message) -> str:
    """The text of the message's first block, which must be a text block."""
    block = message.content[0]
    assert block.type == "text", block.type
    return block.text


def body_of(exc: anthropic.APIStatusError) -> dict[str, Any]:
    """The error's parsed JSON body, which must be an object."""
    assert isinstance(exc.body, dict), exc.body
    return exc.body


def price(usage: anthropic.types.Usage) -> int:
    # Anthropic's input_tokens leave out the cache's: "fast" prices them all as input.
    read = (usage.input_tokens + (usage.cache_read_input_tokens or 0)
            + (usage.cache_creation_input_tokens or 0))
    return cost_nanousd(read, usage.output_tokens, *FAST_PRICE)


def test_create_with_a_system_prompt(gw: Gateway) -> None:
    raw = sdk(gw).messages.with_raw_response.create(
        model="fast", max_tokens=50, system="You are terse.", messages=HELLO,
        extra_headers={"anthropic-beta": "prompt-caching-2024-07-31"})
    message = raw.parse()
    assert raw.headers["x-routegate-model"] == "fast"
    assert message.id.startswith("msg_") and message.type == "message"
    assert message.role == "assistant" and message.model == "fast"   # the configured name
    assert [b.type for b in message.content] == ["text"] and text_of(message)
    assert message.stop_reason in ("end_turn", "max_tokens") and message.stop_sequence is None
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 50


def test_the_system_prompt_and_turns_reach_the_upstream_as_chat(gw: Gateway) -> None:
    """The echo upstream answers with the chat body it received."""
    message = sdk(gw).messages.create(
        model="echo", max_tokens=20, system=[{"type": "text", "text": "Be brief."}],
        metadata={"user_id": "u-7"}, stop_sequences=["STOP"],
        extra_body={"top_k": 3, "thinking": {"type": "enabled", "budget_tokens": 1024}},
        messages=[{"role": "user", "content": "One"}, {"role": "assistant", "content": "Two"},
                  {"role": "user", "content": "Three"}])
    upstream = orjson.loads(text_of(message))
    assert upstream["messages"] == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "One"},
        {"role": "assistant", "content": "Two"}, {"role": "user", "content": "Three"}]
    assert (upstream["max_tokens"], upstream["stop"], upstream["user"]) == (20, ["STOP"], "u-7")
    assert not {"top_k", "thinking", "system", "metadata"} & upstream.keys()


def test_stream_text_and_the_final_message(gw: Gateway) -> None:
    with sdk(gw).messages.stream(model="fast", max_tokens=50, system="You are terse.",
                                 messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and [b.type for b in final.content] == ["text"] and text_of(final) == text
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.input_tokens > 0 and 0 < final.usage.output_tokens <= 50


@pytest.mark.parametrize("streamed", [False, True], ids=["create", "stream"])
def test_max_tokens_is_the_stop_reason_when_it_cuts(gw: Gateway, streamed: bool) -> None:
    client = sdk(gw)
    ask: dict[str, Any] = {"model": "fast", "max_tokens": 3, "messages": HELLO}
    if streamed:
        with client.messages.stream(**ask) as stream:
            message = stream.get_final_message()
    else:
        message = client.messages.create(**ask)
    assert (message.stop_reason, message.usage.output_tokens) == ("max_tokens", 3)


@pytest.mark.parametrize("streamed", [False, True], ids=["create", "stream"])
def test_a_tool_round_trip(gw: Gateway, streamed: bool) -> None:
    client = sdk(gw)
    ask: dict[str, Any] = {"model": "fast", "max_tokens": 100, "tools": [WEATHER],
                           "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    if streamed:
        with client.messages.stream(**ask) as stream:
            first = stream.get_final_message()
    else:
        first = client.messages.create(**ask)
    assert first.stop_reason == "tool_use"
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input, dict)
    assert isinstance(call.input["city"], str)          # the simulator follows the schema
    ask["messages"] += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                      "content": "18C and sunny"}]}]
    final = client.messages.create(**ask, tool_choice={"type": "none"})
    assert [b.type for b in final.content] == ["text"]
    assert final.stop_reason in ("end_turn", "max_tokens")
    # What the upstream saw of the same turn: the call and its result, as chat.
    echoed = orjson.loads(text_of(client.messages.create(**{**ask, "model": "echo"})))
    assert echoed["messages"][1]["tool_calls"][0]["id"] == call.id
    assert echoed["messages"][2] == {"role": "tool", "tool_call_id": call.id,
                                     "content": "18C and sunny"}


def test_tool_choice_names_the_tool(gw: Gateway) -> None:
    now: ToolParam = {"name": "now", "input_schema": {"type": "object", "properties": {}}}
    message = sdk(gw).messages.create(
        model="fast", max_tokens=50, tools=[WEATHER, now], messages=HELLO,
        tool_choice={"type": "tool", "name": "now"})
    assert [(b.type, b.name) for b in message.content if b.type == "tool_use"] == [
        ("tool_use", "now")]


def test_spend_is_exactly_the_price_of_the_usage_reported(gw: Gateway) -> None:
    client = sdk(gw, MONEY_KEY)
    expected = 0
    for _ in range(2):
        expected += price(client.messages.create(model="fast", max_tokens=40, messages=HELLO).usage)
        with client.messages.stream(model="fast", max_tokens=40, messages=HELLO) as stream:
            expected += price(stream.get_final_message().usage)
        with client.messages.stream(model="fast", max_tokens=40, messages=HELLO,
                                    tools=[WEATHER]) as stream:
            expected += price(stream.get_final_message().usage)
    assert expected > 0
    assert spent(gw, MONEY_KEY) == expected


def test_the_message_shows_what_is_billed_not_what_the_upstream_claimed(gw: Gateway) -> None:
    client = sdk(gw, LIAR_KEY)
    created = client.messages.create(model="liar", max_tokens=40, messages=HELLO)
    with client.messages.stream(model="liar", max_tokens=40, messages=HELLO) as stream:
        streamed = stream.get_final_message()
    for message in (created, streamed):
        assert 0 < message.usage.output_tokens <= 40      # never the upstream's 10,000,000
    assert spent(gw, LIAR_KEY) == price(created.usage) + price(streamed.usage)


def test_past_the_hard_budget_the_sdk_raises_rate_limit_error(gw: Gateway) -> None:
    client = sdk(gw, CAPPED_KEY)
    expected, refused = 0, None
    for i in range(20):
        try:
            if i % 2:
                with client.messages.stream(model="fast", max_tokens=50, messages=HELLO) as s:
                    expected += price(s.get_final_message().usage)
            else:
                expected += price(client.messages.create(model="fast", max_tokens=50,
                                                         messages=HELLO).usage)
        except anthropic.RateLimitError as exc:
            refused = exc
            break
    assert refused is not None and expected > 0, "the hard limit never stopped the team"
    assert refused.status_code == 429
    body = body_of(refused)
    assert body["type"] == "error"
    assert body["error"]["type"] == "rate_limit_error"
    assert "hard budget" in body["error"]["message"]
    assert spent(gw, CAPPED_KEY) == expected


def test_missing_max_tokens_is_bad_request(gw: Gateway) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        # The SDK insists on max_tokens itself: send the body through its raw post.
        sdk(gw).post("/v1/messages", body={"model": "fast", "messages": HELLO},
                     cast_to=anthropic.types.Message)
    assert refused.value.body == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "'max_tokens' is a required property"}}


def test_malformed_json_is_bad_request(gw: Gateway) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk(gw).post("/v1/messages", content=b'{"model": "fast", "max_tok',
                     cast_to=anthropic.types.Message,
                     options={"headers": {"content-type": "application/json"}})
    assert body_of(refused.value)["error"]["type"] == "invalid_request_error"
    assert "JSON" in body_of(refused.value)["error"]["message"]


@pytest.mark.parametrize("headers", [{"x-api-key": "sk-wrong"}, {}], ids=["wrong", "missing"])
def test_a_bad_key_is_authentication_error(gw: Gateway, headers: dict[str, str]) -> None:
    reply = httpx.post(gw.base_url + "/messages", headers=headers,
                       json={"model": "fast", "max_tokens": 5, "messages": HELLO})
    assert reply.status_code == 401
    assert reply.json()["type"] == "error"
    assert reply.json()["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.AuthenticationError) as refused:
        sdk(gw, "sk-wrong").messages.create(model="fast", max_tokens=5, messages=HELLO)
    assert body_of(refused.value)["error"]["message"] == "Incorrect API key provided."


def test_a_bearer_token_works_too(gw: Gateway) -> None:
    client = anthropic.Anthropic(base_url=gw.url, auth_token=TEST_KEY, max_retries=0)
    assert client.messages.create(model="fast", max_tokens=5, messages=HELLO).content


def test_an_unknown_model_is_not_found(gw: Gateway) -> None:
    with pytest.raises(anthropic.NotFoundError) as refused:
        sdk(gw).messages.create(model="claude-nope-9", max_tokens=5, messages=HELLO)
    assert body_of(refused.value)["error"]["type"] == "not_found_error"
    assert "claude-nope-9" in body_of(refused.value)["error"]["message"]


def test_a_body_over_the_cap_is_request_too_large(gw: Gateway) -> None:
    # base_config caps bodies at 64 KiB
    huge: list[MessageParam] = [{"role": "user", "content": "x" * 70_000}]
    with pytest.raises(anthropic.ContentTooLargeError) as refused:
        sdk(gw).messages.create(model="fast", max_tokens=5, messages=huge)
    assert refused.value.status_code == 413
    assert body_of(refused.value)["error"]["type"] == "request_too_large"


def test_an_unsupported_block_is_a_clear_bad_request(gw: Gateway) -> None:
    # A PDF's cost cannot be counted before it is read (a text document can: it is text).
    document: DocumentBlockParam = {"type": "document", "source": {
        "type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQ="}}
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk(gw).messages.create(model="fast", max_tokens=5,
                                messages=[{"role": "user", "content": [document]}])
    assert "'document' are not supported" in body_of(refused.value)["error"]["message"]


def test_a_stream_broken_midway_raises_in_the_sdk(gw: Gateway) -> None:
    """The "drops" upstream breaks off after some text: the headers (200) are out, so
    the stream ends in an ``error`` event, which the SDK raises instead of finishing."""
    for _ in range(5):      # the simulator drops at a random token: find a drop after one
        received: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as broken:
            with sdk(gw).messages.stream(model="drops", max_tokens=200, messages=HELLO) as stream:
                received.extend(stream.text_stream)
        if received:
            break
    assert received, "the simulator never dropped after the first token"
    assert broken.value.status_code == 200
    assert broken.value.body == {"type": "error", "error": {
        "type": "api_error", "message": "model drops broke off the stream"}}


def test_count_tokens_is_our_own_count(gw: Gateway) -> None:
    counted = sdk(gw).messages.count_tokens(model="fast", system="You are terse.",
                                            messages=HELLO, tools=[WEATHER])
    counter = counter_for("o200k_base")
    chat_tool = {"type": "function", "function": {"name": WEATHER["name"],
                                                  "parameters": WEATHER["input_schema"],
                                                  "description": WEATHER["description"]}}
    # The tools as OpenAI's models read them (classifiers/prompt.py): what a request of
    # this body reserves is counted the same way, so the two never disagree.
    tools = structured_tokens({"tools": [chat_tool]}, counter)
    expected = counter.count_messages([{"role": "system", "content": "You are terse."},
                                       *HELLO]) + tools
    assert tools > counter.count_text(WEATHER["description"])
    assert counted.input_tokens == expected


def test_count_tokens_counts_against_the_teams_rpm(gw: Gateway) -> None:
    clear_of_minute_turn(20)
    client = sdk(gw, COUNTER_KEY)
    answered = refused = 0
    for _ in range(30):
        try:
            client.messages.count_tokens(model="fast", messages=HELLO)
            answered += 1
        except anthropic.RateLimitError as exc:
            assert body_of(exc)["error"]["type"] == "rate_limit_error"
            refused += 1
    assert (answered, refused) == (10, 20)


def test_count_tokens_refuses_in_anthropics_shape(gw: Gateway) -> None:
    with pytest.raises(anthropic.AuthenticationError):
        sdk(gw, "sk-wrong").messages.count_tokens(model="fast", messages=HELLO)
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk(gw).messages.count_tokens(model="fast", messages=[])
    assert body_of(refused.value)["error"]["type"] == "invalid_request_error"

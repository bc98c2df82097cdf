"""Chat completions through a real gateway process, with the official SDK."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

from tests.support import TEST_KEY, Gateway

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello in five words."}]


def test_non_streaming_completion_has_usage_and_headers(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="fast", messages=HELLO,
                                                           max_tokens=8)
    completion = raw.parse()
    assert raw.headers["x-routegate-model"] == "fast"
    assert raw.headers["x-request-id"]
    assert completion.choices[0].message.content
    assert completion.usage is not None
    assert 0 < completion.usage.completion_tokens <= 8
    assert completion.usage.prompt_tokens > 5


def test_streaming_chunks_end_cleanly(client: openai.OpenAI) -> None:
    with client.chat.completions.with_streaming_response.create(
            model="fast", messages=HELLO, max_tokens=6, stream=True) as response:
        assert response.headers["x-routegate-model"] == "fast"
        chunks = list(response.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert all(c.usage is None for c in chunks), "usage chunk leaked to a client that did not ask"


def test_streamed_usage_when_asked(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(
        model="fast", messages=HELLO, max_tokens=6, stream=True,
        stream_options={"include_usage": True}))
    final = chunks[-1]
    assert final.choices == []
    assert final.usage is not None and final.usage.completion_tokens == sum(
        1 for c in chunks if c.choices and c.choices[0].delta.content)


def test_raw_stream_ends_with_done(gateway: Gateway) -> None:
    body = {"model": "local", "messages": HELLO, "max_tokens": 3, "stream": True}
    r = httpx.post(gateway.base_url + "/chat/completions", json=body,
                   headers={"authorization": f"Bearer {TEST_KEY}"})
    events = [e for e in r.text.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)
    first = json.loads(events[0][6:])
    assert first["object"] == "chat.completion.chunk"


def test_every_parameter_reaches_upstream_untouched(client: openai.OpenAI) -> None:
    tools: list[ChatCompletionFunctionToolParam] = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    completion = client.chat.completions.create(
        model="echo", messages=HELLO, tools=tools, tool_choice="auto", seed=7, stop=["\n"],
        temperature=0.3, user="u-1", logprobs=True, top_logprobs=2,
        response_format={"type": "json_object"}, extra_body={"vendor_knob": {"a": 1}})
    content = completion.choices[0].message.content
    assert content is not None
    sent = json.loads(content)
    assert sent["model"] == "echo"  # the upstream model id from config
    for key, value in {"tools": tools, "tool_choice": "auto", "seed": 7, "stop": ["\n"],
                       "temperature": 0.3, "user": "u-1", "logprobs": True, "top_logprobs": 2,
                       "response_format": {"type": "json_object"},
                       "vendor_knob": {"a": 1}}.items():
        assert sent[key] == value, key


def test_stream_always_asks_upstream_for_usage(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(model="echo", messages=HELLO, stream=True))
    sent = json.loads("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
    assert sent["stream_options"] == {"include_usage": True}
    assert all(c.usage is None for c in chunks)


def test_tool_calls_come_back(client: openai.OpenAI) -> None:
    tools: list[ChatCompletionFunctionToolParam] = [{"type": "function", "function": {
        "name": "lookup", "parameters": {
            "type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}}]
    completion = client.chat.completions.create(model="local", messages=HELLO, tools=tools)
    tool_calls = completion.choices[0].message.tool_calls
    assert tool_calls is not None
    call = tool_calls[0]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert call.type == "function"
    assert call.function.name == "lookup"
    assert set(json.loads(call.function.arguments)) == {"q", "n"}


def test_streamed_tool_calls(client: openai.OpenAI) -> None:
    tools: list[ChatCompletionFunctionToolParam] = [{"type": "function", "function": {
        "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
    chunks = list(client.chat.completions.create(model="fast", messages=HELLO, tools=tools,
                                                 stream=True))
    args = ""
    for c in chunks:
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            assert tc.function is not None
            args += tc.function.arguments or ""
    assert json.loads(args) == {"q": "value"}


def test_logprobs_pass_through(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="fast", messages=HELLO, max_tokens=4,
                                                logprobs=True, top_logprobs=2)
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None and completion.usage is not None
    content = logprobs.content
    assert len(content) == completion.usage.completion_tokens
    assert len(content[0].top_logprobs) == 2


def test_auto_picks_cheapest_fitting_model(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=HELLO,
                                                           max_tokens=5)
    assert raw.headers["x-routegate-model"] == "fast"
    # 1,500 output tokens exceed fast's max_output_tokens (1,024): the next cheapest fits.
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=HELLO,
                                                           max_tokens=1500)
    assert raw.headers["x-routegate-model"] == "local"


def test_auto_skips_models_whose_context_is_too_small(client: openai.OpenAI) -> None:
    # ~5k tokens > fast's 4k
    long_prompt: list[ChatCompletionMessageParam] = [{"role": "user", "content": "word " * 5000}]
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=long_prompt,
                                                           max_tokens=5)
    assert raw.headers["x-routegate-model"] != "fast"


def test_models_lists_alias_and_models(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids[0] == "auto"
    assert {"fast", "strong", "local"} <= set(ids)


def test_health_and_readiness(gateway: Gateway) -> None:
    assert httpx.get(gateway.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(gateway.url + "/readyz")
    assert ready.status_code == 200
    assert ready.json()["redis"] is True
    assert ready.json()["upstreams"]["fast"] is True
    # numba is in [dev]: the gateway's compiled score is built in a thread, and says so.
    deadline = time.monotonic() + 120
    while ready.json()["classifier"] == "building" and time.monotonic() < deadline:
        time.sleep(0.2)
        ready = httpx.get(gateway.url + "/readyz")
    assert ready.json()["classifier"] == "compiled"


@pytest.mark.parametrize("model", ["fast", "local"])
def test_metrics_count_requests(gateway: Gateway, client: openai.OpenAI, model: str) -> None:
    client.chat.completions.create(model=model, messages=HELLO, max_tokens=2)
    text = httpx.get(gateway.url + "/metrics").text
    labels = (f'model="{model}"', 'status="200"', 'team="test"')
    assert any(line.startswith("routegate_requests_total{") and all(x in line for x in labels)
               for line in text.splitlines())

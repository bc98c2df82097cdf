"""The openai and anthropic SDKs through a real gateway onto Azure OpenAI and Bedrock.

Each provider's protocol-faithful test server runs in this process
(``tests/providers/``), the gateway as a child with real Redis. Every test
ends with the two checks that matter: no request reached the server off its
spec (the server's ``refused`` list stays empty), and the team's spend rose
by exactly what the server's own count of each answer costs at the
configured prices, cache reads and writes included, streams too.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest

from tests.providers.hosted import KEY, LADDER_KEY, Hosted, hosted

WEATHER: Any = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
FORECAST = {"type": "object", "properties": {"celsius": {"type": "integer"},
                                             "sky": {"type": "string"}},
            "required": ["celsius", "sky"], "additionalProperties": False}


@pytest.fixture(scope="module", params=["azure", "bedrock"])
def h(request: pytest.FixtureRequest) -> Iterator[Hosted]:
    with hosted(request.param) as running:
        yield running


@pytest.fixture
def billed(h: Hosted) -> Iterator[None]:
    """Around each test: the spend it caused equals the server's ledger, and nothing
    reached the server off-spec."""
    before, rows = spent(h), len(h.rows())
    yield
    deadline = time.monotonic() + 10
    while spent(h) - before != h.owed(rows) and time.monotonic() < deadline:
        time.sleep(0.05)          # settling runs after the answer went out
    assert len(h.rows()) > rows
    assert spent(h) - before == h.owed(rows)
    assert h.refused() == []


def spent(h: Hosted, key: str = KEY) -> int:
    reply = httpx.get(h.gw.base_url + "/usage", headers={"authorization": f"Bearer {key}"})
    return int(reply.json()["spent_today_nanousd"])


def chat(h: Hosted) -> openai.OpenAI:
    return openai.OpenAI(base_url=h.gw.base_url, api_key=KEY, max_retries=0, timeout=30)


def messages(h: Hosted, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=h.gw.url, api_key=key, max_retries=0, timeout=30)


def test_a_plain_chat(h: Hosted, billed: None) -> None:
    raw = chat(h).chat.completions.with_raw_response.create(model=h.main, messages=ASK)
    answer = raw.parse()
    assert raw.headers["x-routegate-model"] == h.main
    assert (answer.choices[0].message.content or "").startswith("Hello! You said: What is")
    assert answer.usage and answer.usage.prompt_tokens == h.rows()[-1].prompt_tokens


def test_a_stream_with_its_usage(h: Hosted, billed: None) -> None:
    chunks = list(chat(h).chat.completions.create(
        model=h.main, messages=ASK, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Hello! You said: What is")
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == h.rows()[-1].completion_tokens


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_forced_tool_call(h: Hosted, billed: None, stream: bool) -> None:
    kw: Any = {"model": h.main, "messages": ASK, "tools": [WEATHER],
               "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    if stream:
        arguments, names = "", ""
        for chunk in chat(h).chat.completions.create(stream=True, **kw):
            for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                names += call.function.name or "" if call.function else ""
                arguments += call.function.arguments or "" if call.function else ""
    else:
        call = chat(h).chat.completions.create(**kw).choices[0].message.tool_calls[0]
        names, arguments = call.function.name, call.function.arguments
    assert names == "get_weather" and json.loads(arguments) == {"city": "Paris"}


def test_a_tool_result_round_trip(h: Hosted, billed: None) -> None:
    first = chat(h).chat.completions.create(model=h.main, messages=ASK, tools=[WEATHER])
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls" and message.tool_calls
    call = message.tool_calls[0]
    history: Any = [*ASK, message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"}]
    second = chat(h).chat.completions.create(model=h.main, messages=history, tools=[WEATHER])
    assert second.choices[0].finish_reason == "stop"
    assert "18 degrees, sunny" in (second.choices[0].message.content or "")


def test_a_batch_line_runs_and_bills_as_the_server_counts(h: Hosted, billed: None) -> None:
    client = chat(h)
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": h.main, "messages": ASK, "max_tokens": 64}}
    upload = client.files.create(file=("in.jsonl", io.BytesIO(json.dumps(line).encode() + b"\n")),
                                 purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    deadline = time.monotonic() + 60
    while (batch := client.batches.retrieve(batch.id)).status not in ("completed", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert batch.status == "completed" and batch.output_file_id is not None
    out = json.loads(client.files.content(batch.output_file_id).content.splitlines()[0])
    body = out["response"]["body"]
    assert out["response"]["status_code"] == 200 and body["model"] == h.main
    assert body["usage"]["prompt_tokens"] == h.rows()[-1].prompt_tokens


def test_json_schema_output(h: Hosted, billed: None) -> None:
    answer = chat(h).chat.completions.create(model=h.main, messages=ASK, response_format={
        "type": "json_schema", "json_schema": {"name": "forecast", "schema": FORECAST,
                                               "strict": True}})
    jsonschema.validate(json.loads(answer.choices[0].message.content or ""), FORECAST)
    assert answer.choices[0].finish_reason == "stop"


def test_anthropic_messages_streams(h: Hosted, billed: None) -> None:
    with messages(h).messages.stream(model=h.main, max_tokens=200, messages=[
            {"role": "user", "content": "Say hello."}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.startswith("Hello! You said: Say hello.")
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == h.rows()[-1].completion_tokens


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_anthropic_messages_tools(h: Hosted, billed: None, stream: bool) -> None:
    kw: Any = {"model": h.main, "max_tokens": 200,
               "messages": [{"role": "user", "content": "Weather in Paris?"}],
               "tools": [{"name": "get_weather", "description": "The weather in a city now.",
                          "input_schema": WEATHER["function"]["parameters"]}],
               "tool_choice": {"type": "tool", "name": "get_weather"}}
    if stream:
        with messages(h).messages.stream(**kw) as running:
            final = running.get_final_message()
    else:
        final = messages(h).messages.create(**kw)
    block = final.content[-1]
    assert final.stop_reason == "tool_use" and block.type == "tool_use"
    assert block.name == "get_weather" and block.input == {"city": "Paris"}


def test_a_cached_prefix_is_billed_at_the_cache_prices(h: Hosted, billed: None) -> None:
    rules = "House rule: answer briefly and exactly. " * 200
    system: Any = {"role": "system", "content": [{"type": "text", "text": rules,
                                                  "cache_control": {"type": "ephemeral"}}]}
    if h.provider == "azure":        # Azure caches on its own; chat has no cache_control
        system = {"role": "system", "content": rules}
    chat(h).chat.completions.create(model=h.main, messages=[system, *ASK])
    streamed = chat(h).chat.completions.create(model=h.main, messages=[system, *ASK],
                                               stream=True)     # the read, streamed
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    first, second = h.rows()[-2:]
    if h.provider == "azure":
        assert first.cached_tokens == 0 and second.cached_tokens >= 1024
    else:
        assert first.cache_write >= 1024 and second.cache_read == first.cache_write


def test_a_throttle_rests_the_model_and_falls_back(h: Hosted) -> None:
    client = openai.OpenAI(base_url=h.gw.base_url, api_key=LADDER_KEY, max_retries=0)
    throttled = h.server.ledger.throttled
    first = client.chat.completions.with_raw_response.create(model="auto", messages=ASK)
    assert first.headers["x-routegate-attempts"] == (
        f"{h.limited}:rate_limit_exceeded,{h.backup}:ok")
    assert httpx.get(h.gw.url + "/readyz").json()["breakers"][h.limited] == "resting"
    second = client.chat.completions.with_raw_response.create(model="auto", messages=ASK)
    assert second.headers["x-routegate-model"] == h.backup
    assert "x-routegate-attempts" not in second.headers
    assert h.server.ledger.throttled == throttled + 1       # the rested model was not called
    assert h.refused() == []

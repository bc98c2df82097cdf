"""The Azure test server against the oracle: ``openai.AzureOpenAI`` calls it directly.

If the official Azure client parses its answers, streams and errors, and
builds the URLs and headers it checks, the server speaks Azure's protocol as
the SDK knows it; the gateway's tests then lean on it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.providers.azure_server import CONTENT_FILTER_TRIGGER, AzureServer
from tests.providers.loopback import serve

VERSION = "2024-10-21"
WEATHER: Any = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
HELLO: Any = [{"role": "user", "content": "Say hello to the team."}]


@pytest.fixture(scope="module")
def azure() -> Iterator[tuple[AzureServer, str]]:
    server = AzureServer({"gpt4o": "chat", "emb": "embedding"})
    with serve(server.app) as url:
        yield server, url


def client(url: str, key: str = "azure-test-key", version: str = VERSION) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(azure_endpoint=url, api_key=key, api_version=version,
                              max_retries=0, timeout=10)


def test_a_chat_answer_parses_with_its_filter_results_and_usage(azure) -> None:
    server, url = azure
    before = len(server.ledger.rows)
    raw = client(url).chat.completions.with_raw_response.create(model="gpt4o", messages=HELLO)
    answer = raw.parse()
    assert answer.usage is not None and answer.choices[0].message.content is not None
    assert answer.choices[0].message.content.startswith("Hello! You said: Say hello")
    data = json.loads(raw.http_response.text)
    assert data["prompt_filter_results"][0]["content_filter_results"]["hate"]["filtered"] is False
    row = server.ledger.rows[before]
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (
        row.prompt_tokens, row.completion_tokens)
    assert server.headers_seen[-1]["api-key"] == "azure-test-key"


def test_a_stream_starts_with_the_filter_chunk_and_ends_with_usage(azure) -> None:
    server, url = azure
    chunks = list(client(url).chat.completions.create(
        model="gpt4o", messages=HELLO, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices == [] and chunks[0].usage is None      # prompt_filter_results only
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Hello! You said:")
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == server.ledger.rows[-1].completion_tokens


def test_a_forced_tool_call_streams_its_arguments(azure) -> None:
    _, url = azure
    chunks = list(client(url).chat.completions.create(
        model="gpt4o", messages=HELLO, tools=[WEATHER], stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    calls = [c.choices[0].delta.tool_calls[0] for c in chunks
             if c.choices and c.choices[0].delta.tool_calls]
    arguments = "".join(call.function.arguments or "" for call in calls if call.function)
    assert json.loads(arguments) == {"city": "Paris"}


def test_errors_come_in_azures_shapes(azure) -> None:
    server, url = azure
    with pytest.raises(openai.AuthenticationError):
        client(url, key="wrong").chat.completions.create(model="gpt4o", messages=HELLO)
    with pytest.raises(openai.NotFoundError) as missing:
        client(url).chat.completions.create(model="nope", messages=HELLO)
    assert missing.value.code == "DeploymentNotFound"
    with pytest.raises(openai.NotFoundError):
        client(url, version="2099-01-01").chat.completions.create(model="gpt4o", messages=HELLO)
    no_version = httpx.post(url + "/openai/deployments/gpt4o/chat/completions",
                            headers={"api-key": server.key}, json={"messages": HELLO})
    assert no_version.status_code == 404
    with pytest.raises(openai.BadRequestError) as bad:
        client(url).chat.completions.create(model="gpt4o", messages=HELLO, temperature=3)
    assert bad.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as unknown:
        client(url).chat.completions.create(model="gpt4o", messages=HELLO,
                                            extra_body={"bogus": 1})
    assert "Unrecognized request argument" in str(unknown.value)


def test_an_old_api_version_refuses_stream_options(azure) -> None:
    _, url = azure
    with pytest.raises(openai.BadRequestError) as old:
        client(url, version="2024-06-01").chat.completions.create(
            model="gpt4o", messages=HELLO, stream=True, stream_options={"include_usage": True})
    assert "stream_options" in str(old.value)


def test_the_content_filter_is_a_400_with_its_verdicts(azure) -> None:
    _, url = azure
    with pytest.raises(openai.BadRequestError) as filtered:
        client(url).chat.completions.create(
            model="gpt4o", messages=[{"role": "user", "content": CONTENT_FILTER_TRIGGER}],
            stream=False)
    assert filtered.value.code == "content_filter"
    body = filtered.value.body
    assert isinstance(body, dict) and body["innererror"]["content_filter_result"]["hate"][
        "filtered"] is True


def test_a_throttle_is_a_429_with_retry_after(azure) -> None:
    server, url = azure
    server.throttle("gpt4o", times=1, retry_after_s=4)
    with pytest.raises(openai.RateLimitError) as limited:
        client(url).chat.completions.create(model="gpt4o", messages=HELLO)
    assert limited.value.response.headers["retry-after"] == "4"
    assert limited.value.response.headers["retry-after-ms"] == "4000"
    client(url).chat.completions.create(model="gpt4o", messages=HELLO)   # once only


def test_embeddings_at_the_deployment_path(azure) -> None:
    server, url = azure
    result = client(url).embeddings.create(model="emb", input=["one two", "three"])
    assert len(result.data) == 2 and result.usage.prompt_tokens == server.ledger.rows[-1].prompt_tokens


def test_a_long_prompt_repeated_reads_the_cache(azure) -> None:
    server, url = azure
    long: Any = [{"role": "system", "content": "Rule: be brief. " * 400}, *HELLO]
    first = client(url).chat.completions.create(model="gpt4o", messages=long)
    second = client(url).chat.completions.create(model="gpt4o", messages=long)
    assert first.usage and second.usage and first.usage.prompt_tokens_details
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details
    cached = second.usage.prompt_tokens_details.cached_tokens or 0
    assert cached >= 1024 and cached % 128 == 0 and cached <= second.usage.prompt_tokens

"""BedrockBackend against the Bedrock test server: signing, credentials, translation both
ways, the event stream, usage with cache tokens, and the error table, on real HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.credentials import Credentials, RefreshableCredentials

from backends.base import UpstreamCall
from backends.bedrock import BedrockBackend
from backends.bedrock.signing import region_in
from core.config import ModelConfig, Price
from core.errors import (
    InvalidRequest,
    UpstreamAuth,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
)
from core.usage import Usage
from gateway.pipeline.tool_calls import ToolCalls
from tests.providers.bedrock_server import ACCESS_KEY, REGION, SECRET_KEY, BedrockServer
from tests.providers.loopback import in_loop, serve

HAIKU = "anthropic.claude-3-haiku-20240307-v1:0"
PROFILE = ("arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
           "us.anthropic.claude-3-5-sonnet-20241022-v2:0")
TEMP_KEY, TEMP_SECRET, TEMP_TOKEN = "ASIAROUTEGATETEMP01", "temp-secret", "temp-session-token"
HELLO = [{"role": "user", "content": "Say hello to the team."}]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
STATIC = Credentials(ACCESS_KEY, SECRET_KEY)


@pytest.fixture(scope="module")
def bedrock() -> Iterator[tuple[BedrockServer, str]]:
    server = BedrockServer({HAIKU, PROFILE}, keys={ACCESS_KEY: (SECRET_KEY, None),
                                                   TEMP_KEY: (TEMP_SECRET, TEMP_TOKEN)})
    with serve(server.app) as url:
        yield server, url


def backend(url: str, model_id: str = HAIKU, credentials: Any = STATIC, **kw: Any
            ) -> BedrockBackend:
    model = ModelConfig(name="claude", backend="bedrock", base_url=url, region=REGION,
                        upstream_model=model_id, max_output_tokens=512,
                        price=Price(input_per_mtok=1, output_per_mtok=2), **kw)
    return BedrockBackend(model, credentials=credentials)


def call(messages: list[dict[str, Any]] = HELLO, stream: bool = False, **extra: Any
         ) -> UpstreamCall:
    payload: dict[str, Any] = {"model": HAIKU, "messages": messages, **extra}
    if stream:
        payload.update(stream=True, stream_options={"include_usage": True})
    return UpstreamCall("req-br", payload, 5)


def billed_as_counted(usage: Usage | None, server: BedrockServer) -> None:
    row = server.ledger.rows[-1]
    assert usage == Usage(row.prompt_tokens, row.output_tokens, cached_tokens=row.cache_read,
                          cache_write_tokens=row.cache_write)


@in_loop
async def test_a_chat_is_a_signed_converse_call(bedrock) -> None:
    server, url = bedrock
    b = backend(url)
    completion = await b.complete(call([{"role": "system", "content": "Be brief."}, *HELLO]))
    await b.aclose()
    message = completion.data["choices"][0]["message"]
    assert message["content"].startswith("Hello! You said: Say hello")
    assert completion.data["choices"][0]["finish_reason"] == "stop"
    billed_as_counted(completion.usage, server)
    assert server.ledger.raw_paths[-1] == "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"


@in_loop
async def test_an_arn_goes_through_aiohttp_percent_encoded(bedrock) -> None:
    server, url = bedrock
    refused = len(server.ledger.refused)
    b = backend(url, PROFILE, transport={"kind": "aiohttp"})
    await b.complete(call())
    await b.aclose()
    assert len(server.ledger.refused) == refused           # the signature held
    assert "%3A" in server.ledger.raw_paths[-1] and "%2F" in server.ledger.raw_paths[-1]


@in_loop
async def test_a_stream_of_a_forced_tool_call(bedrock) -> None:
    server, url = bedrock
    b = backend(url)
    stream = await b.stream(call(stream=True, tools=[WEATHER], tool_choice="required"))
    events = [e async for e in stream]
    await stream.aclose()
    await b.aclose()
    assert events[-1].done and stream.usage is not None
    calls = ToolCalls()
    for e in events:
        if e.data and e.data.get("choices"):
            calls.feed(e.data["choices"][0]["delta"].get("tool_calls"))
    assert [c["function"] for c in calls.assembled()] == [
        {"name": "get_weather", "arguments": '{"city": "Paris"}'}]
    finish = [e.data["choices"][0]["finish_reason"] for e in events if e.data and e.data["choices"]]
    assert finish[-1] == "tool_calls"
    billed_as_counted(stream.usage, server)


@in_loop
async def test_cache_writes_and_reads_are_billed_apart(bedrock) -> None:
    server, url = bedrock
    b = backend(url)
    rules = {"type": "text", "text": "Rule: be exact. " * 300, "cache_control": {"type": "ephemeral"}}
    long: list[dict[str, Any]] = [{"role": "system", "content": [rules]}, *HELLO]
    first = await b.complete(call(long))
    billed_as_counted(first.usage, server)
    stream = await b.stream(call(long, stream=True))
    [e async for e in stream]
    await stream.aclose()
    await b.aclose()
    billed_as_counted(stream.usage, server)
    assert first.usage and first.usage.cache_write_tokens >= 1024 and first.usage.cached_tokens == 0
    assert stream.usage and stream.usage.cached_tokens == first.usage.cache_write_tokens


@in_loop
async def test_temporary_credentials_refresh_off_the_event_loop(bedrock) -> None:
    server, url = bedrock
    refreshed: list[int] = []

    def refresh() -> dict[str, str]:
        refreshed.append(threading.get_ident())
        expiry = datetime.now(UTC) + timedelta(minutes=5)     # inside botocore's refresh window
        return {"access_key": TEMP_KEY, "secret_key": TEMP_SECRET, "token": TEMP_TOKEN,
                "expiry_time": expiry.isoformat()}

    credentials = RefreshableCredentials.create_from_metadata(refresh(), refresh, "test")
    refreshed.clear()
    b = backend(url, credentials=credentials)
    await b.complete(call())
    await b.aclose()
    assert refreshed and threading.get_ident() not in refreshed
    assert server.ledger.tokens[-1] == TEMP_TOKEN


@in_loop
async def test_the_standard_chain_reads_the_environment(bedrock, monkeypatch) -> None:
    _, url = bedrock
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    b = backend(url, credentials=None)
    completion = await b.complete(call())
    await b.aclose()
    assert completion.usage is not None


@in_loop
async def test_the_error_table_on_the_wire(bedrock) -> None:
    server, url = bedrock
    b = backend(url)
    server.throttle(HAIKU, 1)
    with pytest.raises(UpstreamRateLimited):
        await b.complete(call())
    server.throttle(HAIKU, 1, "ModelNotReadyException")
    with pytest.raises(UpstreamError) as not_ready:
        await b.complete(call())
    assert not_ready.value.retryable and not isinstance(not_ready.value, UpstreamRateLimited)
    with pytest.raises(UpstreamRejected) as invalid:            # ValidationException
        await backend(url, "anthropic.unknown-model-v1:0").complete(call())
    assert invalid.value.status_code == 400 and "model identifier" in invalid.value.message
    with pytest.raises(UpstreamAuth):
        await backend(url, credentials=Credentials(ACCESS_KEY, "wrong")).complete(call())
    with pytest.raises(InvalidRequest):                         # refused before sending
        await b.complete(call(temperature=1.7))
    await b.aclose()


@in_loop
async def test_an_exception_frame_before_and_after_the_first_chunk(bedrock) -> None:
    server, url = bedrock
    b = backend(url)
    server.break_stream(HAIKU, after_events=0)
    with pytest.raises(UpstreamRateLimited):                    # the ladder can fall back
        await b.stream(call(stream=True))
    server.break_stream(HAIKU, after_events=3)
    stream = await b.stream(call(stream=True))
    with pytest.raises(UpstreamRateLimited):
        [e async for e in stream]
    await stream.aclose()
    await b.aclose()
    assert b.stats.in_flight == 0


def test_embeddings_are_refused_by_name() -> None:
    b = backend("http://127.0.0.1:9")
    with pytest.raises(UpstreamRejected) as refused:
        b._translate(UpstreamCall("r", {"input": "x"}, 1, route="embeddings"))
    assert refused.value.code == "upstream_unsupported"


def test_the_region_in_an_endpoint() -> None:
    assert region_in("https://bedrock-runtime.eu-west-3.amazonaws.com") == "eu-west-3"
    assert region_in("https://vpce-0a1b-xyz.bedrock-runtime.us-east-2.vpce.amazonaws.com") == "us-east-2"
    assert region_in("http://127.0.0.1:8080") is None

"""``AnthropicBackend`` at its edge, against the Anthropic test server on loopback.

No gateway: the backend's own calls, what it sends (the server's ledger says
whether it was on-spec), and how each of Anthropic's failures lands in the
error tree (docs/api.md, "Upstream errors"; ``backends/anthropic_messages/errors.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from backends.anthropic_messages import AnthropicBackend
from backends.anthropic_messages.backend import DEFAULT_BASE_URL
from backends.base import ANTHROPIC_MESSAGES, NativeRequest, UpstreamCall
from backends.sse import NativeEvent, SSEEvent
from core.config import ModelConfig, Price
from core.errors import (
    GatewayError,
    UpstreamAuth,
    UpstreamOverloaded,
    UpstreamRateLimited,
    UpstreamRejected,
)
from loadtest.servers import free_port
from tests.providers.anthropic_server import ANTHROPIC_KEY, AnthropicServer, run_anthropic_server

KEY_ENV = "ROUTEGATE_TEST_BACKEND_ANTHROPIC_KEY"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hello backend."}],
        "max_tokens": 32, "temperature": 0.5}


@pytest.fixture(scope="module")
def server() -> Iterator[AnthropicServer]:
    with run_anthropic_server() as running:
        yield running


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, ANTHROPIC_KEY)


def model(server: AnthropicServer | None, upstream: str = "claude-test", **kw: Any) -> ModelConfig:
    fields: dict[str, Any] = {"name": "claude-configured", "backend": "anthropic",
                              "upstream_model": upstream, "api_key_env": KEY_ENV,
                              "price": Price(input_per_mtok=1, output_per_mtok=1), **kw}
    if server is not None:
        fields["base_url"] = server.url
    return ModelConfig(**fields)


def call(payload: dict[str, Any] | None = None, **kw: Any) -> UpstreamCall:
    return UpstreamCall("req-1", payload or dict(CHAT), prompt_tokens=5, **kw)


async def complete(config: ModelConfig, upstream_call: UpstreamCall) -> Any:
    backend = AnthropicBackend(config)
    try:
        return await backend.complete(upstream_call)
    finally:
        await backend.aclose()


async def streamed(config: ModelConfig, upstream_call: UpstreamCall) -> list[SSEEvent]:
    backend = AnthropicBackend(config)
    try:
        stream = await backend.stream(upstream_call)
        try:
            return [event async for event in stream]
        finally:
            await stream.aclose()
    finally:
        await backend.aclose()


def test_base_url_defaults_to_anthropics_and_goes_over_tls() -> None:
    backend = AnthropicBackend(model(None))
    assert backend.model.base_urls == [DEFAULT_BASE_URL]
    assert type(backend._transport).__name__ == "AiohttpTransport"
    asyncio.run(backend.aclose())


def test_a_chat_call_sends_the_key_and_version_and_reads_the_usage(server: AnthropicServer) -> None:
    completion = asyncio.run(complete(model(server), call()))
    sent = server.ledger[-1]
    assert sent.status == 200 and not sent.off_spec and not sent.lints
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.body["temperature"] == 0.5 and sent.body["model"] == "claude-test"
    assert completion.data["model"] == "claude-configured" and completion.native is None
    assert completion.usage.prompt_tokens == (sent.usage or {})["input_tokens"]


def test_api_version_2026_10_21_leaves_sampling_out(server: AnthropicServer) -> None:
    asyncio.run(complete(model(server, api_version="2026-10-21"), call()))
    sent = server.ledger[-1]
    assert sent.status == 200 and "temperature" not in sent.body
    assert sent.headers["anthropic-version"] == "2026-10-21"


def test_a_stream_ends_in_the_usage_chunk_and_done(server: AnthropicServer) -> None:
    events = asyncio.run(streamed(model(server), call({**CHAT, "stream": True})))
    assert events[-1].done and events[-2].is_usage_only
    assert "Hello backend." in "".join(e.generated for e in events)
    assert events[-2].data["usage"]["completion_tokens"] == (    # type: ignore[index]
        server.ledger[-1].usage or {})["output_tokens"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_replica_that_refuses_connections_is_passed_over(server: AnthropicServer,
                                                           stream: bool) -> None:
    """Two replicas, the first (where the call would go) a port nobody listens on: the
    call is answered by the second, once, and the first is marked down."""
    dead = f"http://127.0.0.1:{free_port()}"
    config = model(None, base_url=[dead, server.url])
    seen = len(server.ledger)

    async def run() -> tuple[int | None, list[int], float]:
        backend = AnthropicBackend(config)
        upstream_call = call({**CHAT, "stream": stream}, replica=0)
        try:
            if stream:
                answer = await backend.stream(upstream_call)
                async for _ in answer:
                    pass
                await answer.aclose()
            else:
                await backend.complete(upstream_call)
            return upstream_call.replica, backend.affinity.in_flight, backend.affinity.down_until[0]
        finally:
            await backend.aclose()

    replica, in_flight, down = asyncio.run(run())
    assert replica == 1 and in_flight == [0, 0] and down > 0
    assert len(server.ledger) == seen + 1 and server.ledger[-1].status == 200


def test_a_native_call_goes_as_written_and_comes_back_as_anthropic_wrote_it(
        server: AnthropicServer) -> None:
    body = {"model": "auto", "max_tokens": 16, "top_k": 5,
            "messages": [{"role": "user", "content": "Native."}]}
    native = NativeRequest(ANTHROPIC_MESSAGES, body, {"anthropic-beta": "bad\r\nx-evil: 1"})
    completion = asyncio.run(complete(model(server), call(native=native)))
    sent = server.ledger[-1]
    assert sent.body == {**body, "model": "claude-test"}
    assert "anthropic-beta" not in sent.headers              # not a header value: not sent
    assert completion.native is not None and b'"model":"claude-configured"' in completion.native
    events = asyncio.run(streamed(model(server), call(native=NativeRequest(
        ANTHROPIC_MESSAGES, {**body, "stream": True}, {"anthropic-beta": "files-api-2025-04-14"}))))
    assert server.ledger[-1].headers["anthropic-beta"] == "files-api-2025-04-14"
    natives = [e for e in events if isinstance(e, NativeEvent)]
    assert natives[0].native.startswith(b"event: message_start") and b"claude-configured" in \
        natives[0].native
    assert [e.native.split(b"\n")[0] for e in natives][-3:] == [
        b"event: message_delta", b"event: message_stop", b""]       # then the usage chunk
    assert natives[-1].is_usage_only and events[-1].done


@pytest.mark.parametrize("upstream, stream, error, code", [
    ("claude-throttled", False, UpstreamRateLimited, "rate_limit_exceeded"),
    ("claude-overloaded", False, UpstreamOverloaded, "upstream_overloaded"),
    ("claude-stream-overloaded", True, UpstreamOverloaded, "upstream_overloaded"),
    ("claude-nonesuch", False, UpstreamRejected, "upstream_unsupported"),
])
def test_failures_land_in_the_error_tree(server: AnthropicServer, upstream: str, stream: bool,
                                         error: type[GatewayError], code: str) -> None:
    config, payload = model(server, upstream), {**CHAT, "stream": stream}
    with pytest.raises(error) as failed:
        asyncio.run((streamed if stream else complete)(config, call(payload)))
    assert failed.value.code == code and failed.value.retryable == (error is not UpstreamRejected)
    if upstream == "claude-throttled":
        assert failed.value.retry_after_s == 7.0       # type: ignore[attr-defined]


def test_a_refused_request_and_a_refused_key(server: AnthropicServer,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    bad = {**CHAT, "messages": [{"role": "tool", "tool_call_id": "toolu_x", "content": "18C"}]}
    with pytest.raises(UpstreamRejected) as rejected:
        asyncio.run(complete(model(server), call(bad)))
    assert rejected.value.status_code == 400 and "unexpected `tool_use_id`" in rejected.value.message
    monkeypatch.setenv(KEY_ENV, "sk-ant-wrong-key-0000")
    with pytest.raises(UpstreamAuth):
        asyncio.run(complete(model(server), call()))
    with pytest.raises(UpstreamRejected) as legacy:
        asyncio.run(complete(model(server), call(route="completions")))
    assert legacy.value.code == "upstream_unsupported"

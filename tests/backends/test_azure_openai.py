"""AzureOpenAIBackend against the Azure test server: URLs, keys, Entra tokens,
content filtering, throttles and usage, in process on real HTTP."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from backends.azure_openai import AzureOpenAIBackend, azure_retry_after_s, streams_usage
from backends.base import UpstreamCall
from core.config import ModelConfig, Price
from core.errors import UpstreamAuth, UpstreamRateLimited, UpstreamRejected
from tests.providers.azure_server import CONTENT_FILTER_TRIGGER, AzureServer
from tests.providers.loopback import in_loop, serve

KEY_ENV = "RG_TEST_AZURE_KEY"
HELLO = [{"role": "user", "content": "Say hello to the team."}]


@pytest.fixture(scope="module")
def azure() -> Iterator[tuple[AzureServer, str]]:
    server = AzureServer({"gpt4o": "chat", "emb": "embedding"}, bearer_tokens=("entra-1",
                                                                               "entra-2"))
    os.environ[KEY_ENV] = server.key
    with serve(server.app) as url:
        yield server, url


def model(url: str, deployment: str = "gpt4o", **kw: Any) -> ModelConfig:
    fields: dict[str, Any] = {"api_key_env": KEY_ENV, **kw}
    return ModelConfig(name="az", backend="azure_openai", base_url=url,
                       upstream_model=deployment, price=Price(input_per_mtok=1, output_per_mtok=2),
                       **fields)


def call(stream: bool = False, messages: list[dict[str, Any]] = HELLO, **extra: Any
         ) -> UpstreamCall:
    payload: dict[str, Any] = {"model": "gpt4o", "messages": messages, **extra}
    if stream:
        payload.update(stream=True, stream_options={"include_usage": True})
    return UpstreamCall("req-az", payload, 5)


class Token(NamedTuple):
    token: str
    expires_on: int


class Credential:
    """An azure-identity credential as the test supplies it: async ``get_token``."""

    def __init__(self, lifetime_s: float, fail: bool = False) -> None:
        self.lifetime_s, self.fail, self.calls = lifetime_s, fail, 0
        self.threads: set[int] = set()

    async def get_token(self, *scopes: str) -> Token:
        assert scopes == ("https://cognitiveservices.azure.com/.default",)
        self.calls += 1
        if self.fail:
            raise RuntimeError("no managed identity here")
        await asyncio.sleep(0.01)
        return Token(f"entra-{min(self.calls, 2)}", int(time.time() + self.lifetime_s))


class SyncCredential(Credential):
    def get_token(self, *scopes: str) -> Token:  # type: ignore[override]
        self.threads.add(threading.get_ident())
        self.calls += 1
        return Token("entra-1", int(time.time() + self.lifetime_s))


@in_loop
async def test_a_deployment_is_called_at_its_path_with_its_key(azure) -> None:
    server, url = azure
    backend = AzureOpenAIBackend(model(url))
    completion = await backend.complete(call())
    await backend.aclose()
    row = server.ledger.rows[-1]
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (
        row.prompt_tokens, row.completion_tokens)
    assert completion.data["prompt_filter_results"][0]["prompt_index"] == 0
    assert server.headers_seen[-1]["api-key"] == server.key
    assert "authorization" not in server.headers_seen[-1]


@in_loop
async def test_a_stream_relays_the_filter_chunk_and_reads_the_usage(azure) -> None:
    server, url = azure
    backend = AzureOpenAIBackend(model(url))
    stream = await backend.stream(call(stream=True))
    events = [e async for e in stream]
    await stream.aclose()
    await backend.aclose()
    assert events[0].data is not None and events[0].data["choices"] == []
    assert "prompt_filter_results" in events[0].data and not events[0].generated
    assert events[-1].done
    assert stream.usage is not None
    assert stream.usage.completion_tokens == server.ledger.rows[-1].completion_tokens


@in_loop
async def test_an_old_api_version_streams_without_stream_options(azure) -> None:
    server, url = azure
    refused = len(server.ledger.refused)
    backend = AzureOpenAIBackend(model(url, api_version="2024-06-01"))
    stream = await backend.stream(call(stream=True))
    text = "".join([e.generated async for e in stream])
    await stream.aclose()
    await backend.aclose()
    assert text.startswith("Hello!") and stream.usage is None
    assert len(server.ledger.refused) == refused


@in_loop
async def test_the_content_filter_is_the_clients_400_not_a_failure(azure) -> None:
    _, url = azure
    backend = AzureOpenAIBackend(model(url))
    with pytest.raises(UpstreamRejected) as filtered:
        await backend.complete(call(messages=[{"role": "user", "content": CONTENT_FILTER_TRIGGER}]))
    await backend.aclose()
    err = filtered.value
    assert (err.status_code, err.code, err.param) == (400, "content_filter", "prompt")
    assert "hate (medium)" in err.message and not err.retryable
    assert backend.stats.last_failure == 0.0


@in_loop
async def test_a_throttle_is_rate_limited_with_azures_wait(azure) -> None:
    server, url = azure
    server.throttle("gpt4o", times=1, retry_after_s=2.5)
    backend = AzureOpenAIBackend(model(url))
    with pytest.raises(UpstreamRateLimited) as limited:
        await backend.complete(call())
    await backend.aclose()
    assert limited.value.retry_after_s == 2.5 and limited.value.retryable


@in_loop
async def test_a_missing_deployment_is_named(azure) -> None:
    _, url = azure
    backend = AzureOpenAIBackend(model(url, deployment="gone"))
    with pytest.raises(UpstreamRejected) as missing:
        await backend.complete(call())
    await backend.aclose()
    assert missing.value.code == "upstream_unsupported" and "'gone'" in missing.value.message


@in_loop
async def test_embeddings_go_to_the_deployments_embeddings_path(azure) -> None:
    server, url = azure
    backend = AzureOpenAIBackend(model(url, deployment="emb", kind="embedding"))
    result = await backend.complete(UpstreamCall("req-e", {"model": "emb", "input": "a b c"}, 3,
                                                 route="embeddings"))
    await backend.aclose()
    assert result.usage is not None and result.usage.prompt_tokens == server.ledger.rows[-1].prompt_tokens


@in_loop
async def test_an_entra_token_is_fetched_once_and_refreshed_before_expiry(azure) -> None:
    server, url = azure
    credential = Credential(lifetime_s=3600)
    backend = AzureOpenAIBackend(model(url, api_key_env=None), credential=credential)
    await asyncio.gather(*(backend.complete(call()) for _ in range(5)))
    assert credential.calls == 1                       # one fetch for five requests at once
    assert server.headers_seen[-1]["authorization"] == "Bearer entra-1"
    backend._entra._expires_on = time.time() + 100     # type: ignore[union-attr]  # 100 s left
    await backend.complete(call())                     # still the valid token, refresh behind
    assert server.headers_seen[-1]["authorization"] == "Bearer entra-1"
    await asyncio.sleep(0.1)
    await backend.complete(call())
    assert credential.calls == 2 and server.headers_seen[-1]["authorization"] == "Bearer entra-2"
    await backend.aclose()


@in_loop
async def test_a_sync_credential_runs_off_the_event_loop(azure) -> None:
    server, url = azure
    credential = SyncCredential(lifetime_s=3600)
    backend = AzureOpenAIBackend(model(url, api_key_env=None), credential=credential)
    await backend.complete(call())
    await backend.aclose()
    assert credential.threads and threading.get_ident() not in credential.threads
    assert server.headers_seen[-1]["authorization"] == "Bearer entra-1"


@in_loop
async def test_a_failing_credential_is_upstream_auth(azure) -> None:
    _, url = azure
    backend = AzureOpenAIBackend(model(url, api_key_env=None), credential=Credential(60, fail=True))
    with pytest.raises(UpstreamAuth):
        await backend.complete(call())
    await backend.aclose()


def test_the_api_versions_that_take_stream_options() -> None:
    assert streams_usage("2024-10-21") and streams_usage("2024-09-01-preview")
    assert streams_usage("2025-04-01-preview") and streams_usage("v1")
    assert not streams_usage("2024-06-01") and not streams_usage("2024-08-01-preview")


def test_azures_retry_after_headers_are_read_in_order_and_capped() -> None:
    assert azure_retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert azure_retry_after_s({"x-ms-retry-after-ms": "250"}) == 0.25
    assert azure_retry_after_s({"retry-after": "9"}) == 9
    assert azure_retry_after_s({"retry-after-ms": "99999999"}, cap=60) == 60
    assert azure_retry_after_s({}) is None

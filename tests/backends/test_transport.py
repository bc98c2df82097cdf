"""The transport factory's choice, and the aiohttp transport on raw sockets
(proxy included: a raw server that checks it was asked as a proxy)."""

from __future__ import annotations

import pytest

from backends.aiohttp_transport import AiohttpTransport
from backends.http1 import ConnectionPool
from backends.transport import Origin, ResponseTooLarge
from backends.transports import make_transport
from core.config import ModelConfig, Price, TransportConfig
from tests.backends.rawserver import QUICK, chunked, fixed, raw_server, synchronous

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
              "http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def model(url: str, kind: str = "auto") -> ModelConfig:
    return ModelConfig(name="m", backend="openai_compat", base_url=url,
                       price=Price(input_per_mtok=1, output_per_mtok=1),
                       transport={"kind": kind})  # type: ignore[arg-type]


def test_auto_is_lean_for_plain_http_without_a_proxy(no_proxy_env: pytest.MonkeyPatch) -> None:
    assert isinstance(make_transport(model("http://vllm:8000/v1")), ConnectionPool)
    assert isinstance(make_transport(model("https://api.openai.com/v1")), AiohttpTransport)
    assert isinstance(make_transport(model("http://vllm:8000/v1", "aiohttp")), AiohttpTransport)
    assert isinstance(make_transport(model("https://api.openai.com/v1", "lean")), ConnectionPool)


@pytest.mark.parametrize("var", ["HTTP_PROXY", "https_proxy", "ALL_PROXY"])
def test_auto_is_aiohttp_when_a_proxy_applies(no_proxy_env: pytest.MonkeyPatch, var: str) -> None:
    no_proxy_env.setenv(var, "http://proxy.internal:3128")
    assert isinstance(make_transport(model("http://vllm:8000/v1")), AiohttpTransport)
    no_proxy_env.setenv("NO_PROXY", "localhost,vllm")
    assert isinstance(make_transport(model("http://vllm:8000/v1")), ConnectionPool)
    assert isinstance(make_transport(model("http://other:8000/v1")), AiohttpTransport)


@synchronous
async def test_aiohttp_round_trip_stream_and_keep_alive() -> None:
    seen: list[bytes] = []

    def answer(raw: bytes) -> list[bytes | float]:
        seen.append(raw)
        return fixed(b'{"ok": 1}') if len(seen) == 1 else chunked(b"data: 1\n\n", b"data: 2\n\n")

    async with raw_server(answer) as (origin, counts):
        transport = AiohttpTransport(TransportConfig(kind="aiohttp"))
        resp = await transport.request(origin, b"POST", "/v1/chat/completions",
                                       b"content-type: application/json\r\nx-a: b\r\n", b"{}", QUICK)
        assert (resp.status, await resp.read()) == (200, b'{"ok": 1}')
        resp = await transport.request(origin, b"POST", "/v1/x", b"", b"{}", QUICK)
        pieces = [await resp.readany(), await resp.readany(), await resp.readany()]
        assert pieces == [b"data: 1\n\n", b"data: 2\n\n", b""] and resp.done
        resp.release()
        await transport.aclose()
    assert seen[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"x-a: b\r\n" in seen[0].lower() and seen[0].endswith(b"{}")
    assert counts == [2]


@synchronous
async def test_aiohttp_body_cap() -> None:
    async with raw_server(lambda raw: chunked(b"x" * 1500, b"y" * 1500)) as (origin, _):
        transport = AiohttpTransport(TransportConfig(kind="aiohttp", max_body_bytes=2048))
        resp = await transport.request(origin, b"POST", "/v1/x", b"", b"{}", QUICK)
        with pytest.raises(ResponseTooLarge):
            await resp.read()
        await transport.aclose()


@synchronous
async def test_aiohttp_follows_http_proxy_from_the_environment() -> None:
    """The raw server plays the proxy: it must be asked for the absolute URL."""
    seen: list[bytes] = []

    def proxy(raw: bytes) -> list[bytes | float]:
        seen.append(raw)
        return fixed(b'{"via": "proxy"}')

    with pytest.MonkeyPatch.context() as env:
        for name in PROXY_VARS:
            env.delenv(name, raising=False)
        async with raw_server(proxy) as (proxy_origin, _):
            env.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy_origin.port}")
            upstream = Origin.parse("http://upstream.invalid:8000/v1")
            transport = AiohttpTransport(TransportConfig(kind="aiohttp"))
            resp = await transport.request(upstream, b"POST", "/v1/chat/completions", b"", b"{}",
                                           QUICK)
            assert await resp.read() == b'{"via": "proxy"}'
            await transport.aclose()
    assert seen[0].startswith(b"POST http://upstream.invalid:8000/v1/chat/completions HTTP/1.1")

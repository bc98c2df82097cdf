"""OpenAICompatBackend against raw-socket upstreams: timeouts, stream
completeness, the status mapping on the wire, and bugs left unconverted."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from backends.base import UpstreamCall
from backends.openai_compat import OpenAICompatBackend
from backends.transport import Origin
from core.config import ModelConfig, Price
from core.errors import (
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamSaturated,
    UpstreamTimeout,
    UpstreamTooLarge,
    UpstreamUnreachable,
)
from tests.backends.rawserver import chunked, fixed, raw_server, synchronous

ANSWER = orjson.dumps({"id": "x", "object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})
CHUNK = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'


def backend(origin: Origin, timeouts: dict[str, float] | None = None,
            **transport: Any) -> OpenAICompatBackend:
    model = ModelConfig(name="m", backend="openai_compat",
                        base_url=f"http://127.0.0.1:{origin.port}/v1",
                        price=Price(input_per_mtok=1, output_per_mtok=1),
                        timeouts={"connect_s": 1, **(timeouts or {})},  # type: ignore[arg-type]
                        transport={"kind": "lean", **transport})       # type: ignore[arg-type]
    return OpenAICompatBackend(model)


def call(stream: bool = False, **payload: Any) -> UpstreamCall:
    return UpstreamCall("req-1", {"model": "m", "messages": [], "stream": stream, **payload}, 3)


async def drain(b: OpenAICompatBackend) -> list[bytes]:
    stream = await b.stream(call(stream=True))
    try:
        return [event.raw async for event in stream]
    finally:
        await stream.aclose()


@synchronous
async def test_a_generation_longer_than_first_byte_s_succeeds_within_total_s() -> None:
    async with raw_server(lambda raw: [2.5, *fixed(ANSWER)]) as (origin, _):
        b = backend(origin, {"first_byte_s": 1, "total_s": 5})
        completion = await b.complete(call())
        await b.aclose()
    assert completion.usage is not None and completion.usage.completion_tokens == 1
    assert completion.latency_s >= 2.5


@synchronous
async def test_running_out_of_total_s_is_a_504_that_is_never_retried() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"
    for answer in ([5.0], [head, 5.0]):                   # before and after the first byte
        async with raw_server(lambda raw, a=answer: a) as (origin, _):   # type: ignore[misc]
            b = backend(origin, {"first_byte_s": 0.2, "total_s": 0.5})
            with pytest.raises(UpstreamTimeout) as info:
                await b.complete(call())
            await b.aclose()
        assert info.value.generating and not info.value.retryable
        assert info.value.status_code == 504


@synchronous
async def test_a_stream_waits_first_byte_s_for_its_first_event_then_falls_back() -> None:
    async with raw_server(lambda raw: [1.0, *chunked(CHUNK)]) as (origin, _):
        b = backend(origin, {"first_byte_s": 0.3})
        with pytest.raises(UpstreamTimeout) as info:
            await b.stream(call(stream=True))
        await b.aclose()
    assert info.value.retryable and b.stats.in_flight == 0


@synchronous
async def test_a_complete_stream_ends_with_done() -> None:
    async with raw_server(lambda raw: chunked(CHUNK, b"data: [DONE]\n\n")) as (origin, counts):
        b = backend(origin)
        assert await drain(b) == [CHUNK, b"data: [DONE]\n\n"]
        assert await drain(b) == [CHUNK, b"data: [DONE]\n\n"]
        await b.aclose()
    assert counts == [2]                                  # the connection went back to the pool


@synchronous
async def test_a_stream_ended_cleanly_without_done_is_truncated() -> None:
    async with raw_server(lambda raw: chunked(CHUNK, CHUNK)) as (origin, _):
        b = backend(origin)
        stream = await b.stream(call(stream=True))
        seen = []
        with pytest.raises(UpstreamError) as info:
            async for event in stream:
                seen.append(event.raw)
        await stream.aclose()
        await b.aclose()
    assert seen == [CHUNK, CHUNK]                         # what came is relayed, then the error
    assert info.value.code == "upstream_stream_truncated" and "m" in info.value.message


@synchronous
async def test_a_stream_cut_off_mid_body_is_truncated() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    # then the server closes the connection
    cut: list[bytes | float] = [head, b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK)]
    async with raw_server(lambda raw: cut, close_after=1) as (origin, _):
        b = backend(origin)
        with pytest.raises(UpstreamError) as info:
            await drain(b)
        await b.aclose()
    assert info.value.code == "upstream_stream_truncated"
    assert b.stats.in_flight == 0


@synchronous
async def test_upstream_statuses_on_the_wire() -> None:
    limited = fixed(b'{"error": {"message": "slow down"}}', 429, b"retry-after: 3\r\n")
    async with raw_server(lambda raw: limited) as (origin, _):
        b = backend(origin)
        with pytest.raises(UpstreamRateLimited) as info:
            await b.complete(call())
        assert info.value.headers["retry-after"] == "3"
        with pytest.raises(UpstreamRateLimited):
            await b.stream(call(stream=True))
        await b.aclose()
    too_long = fixed(b'{"error": {"message": "context length exceeded"}}', 422)
    async with raw_server(lambda raw: too_long) as (origin, _):
        b = backend(origin)
        for attempt in (b.complete(call()), b.stream(call(stream=True))):
            with pytest.raises(UpstreamRejected) as rejected:
                await attempt
            assert rejected.value.status_code == 400
            assert "context length exceeded" in rejected.value.message
        await b.aclose()
    assert b.stats.in_flight == 0


@synchronous
async def test_transport_limits_reach_the_client_as_gateway_errors() -> None:
    async with raw_server(lambda raw: [0.5, *fixed(ANSWER)]) as (origin, _):
        b = backend(origin, {"pool_wait_s": 0.1}, max_connections=1)
        first = asyncio.create_task(b.complete(call()))
        await asyncio.sleep(0.05)
        with pytest.raises(UpstreamSaturated) as saturated:
            await b.complete(call())
        assert saturated.value.status_code == 503 and saturated.value.retryable
        await first
        await b.aclose()
    async with raw_server(lambda raw: fixed(b"x" * 4096)) as (origin, _):
        b = backend(origin, max_body_bytes=2048)
        with pytest.raises(UpstreamTooLarge) as large:
            await b.complete(call())
        assert large.value.status_code == 502 and not large.value.retryable
        await b.aclose()


@synchronous
async def test_an_unreachable_upstream_is_retryable() -> None:
    async with raw_server(lambda raw: None) as (origin, _):
        pass                                              # closed: nothing listens there now
    b = backend(origin)
    with pytest.raises(UpstreamUnreachable) as info:
        await b.complete(call())
    assert info.value.retryable


@synchronous
async def test_a_bug_is_not_turned_into_an_upstream_error() -> None:
    async with raw_server(lambda raw: chunked(CHUNK, 0.2, CHUNK, b"data: [DONE]\n\n")) as (origin, _):
        b = backend(origin)
        unserializable = call(stream=True, tools={1, 2})  # a set: orjson raises TypeError
        with pytest.raises(TypeError):
            await b.complete(unserializable)
        with pytest.raises(TypeError):
            await b.stream(unserializable)
        stream = await b.stream(call(stream=True))
        b.between_s = "soon"  # type: ignore[assignment]  # our own mistake, mid-stream
        with pytest.raises(TypeError):
            async for _ in stream:
                pass
        await stream.aclose()
        await b.aclose()
    assert b.stats.in_flight == 0


@synchronous
async def test_a_non_streamed_answer_teaches_tpot_only_from_the_server_s_timings() -> None:
    """Its whole time over its tokens holds the upstream's queue and the prefill: 20
    tokens after 0.3 s are not 15 ms a token. llama.cpp's own timings are read."""
    usage = {"prompt_tokens": 3, "completion_tokens": 20, "total_tokens": 23}
    plain = orjson.dumps({**orjson.loads(ANSWER), "usage": usage})
    timed = orjson.dumps({**orjson.loads(plain),
                          "timings": {"prompt_ms": 40.0, "predicted_per_token_ms": 12.5}})
    learned = []
    for body in (plain, timed):
        async with raw_server(lambda raw, b=body: [0.3, *fixed(b)]) as (origin, _):  # type: ignore[misc]
            b = backend(origin)
            completion = await b.complete(call())
            await b.aclose()
        learned.append((b.stats.tpot_s, b.stats.ttft_s, completion.ttft_s))
    assert learned[0] == (None, None, None)
    assert learned[1] == (pytest.approx(0.0125), pytest.approx(0.04), pytest.approx(0.04))

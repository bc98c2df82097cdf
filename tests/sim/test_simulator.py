"""The simulator's serving physics and failure injection, in-process."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from backends.base import UpstreamCall
from core.config import ModelConfig, Price, SimulateConfig, Timeouts
from core.errors import UpstreamError
from sim.backend import SimulatedBackend
from sim.count import prompt_tokens as count_prompt

MSG = {"messages": [{"role": "user", "content": "hi"}]}


def backend(**sim: Any) -> SimulatedBackend:
    config = ModelConfig(name="m", price=Price(input_per_mtok=1, output_per_mtok=1),
                         simulate=SimulateConfig(**{"seed": 1, **sim}))
    return SimulatedBackend(config)


def call(prompt_tokens: int = 10, **payload: object) -> UpstreamCall:
    """A call whose prompt the simulator counts (``sim_count.py``, from the body it
    receives) as ``prompt_tokens``: a message of that many tokens, less the template's.
    The gateway's figure in the call is deliberately wrong: the simulator ignores it."""
    for words in range(max(0, prompt_tokens - 12), prompt_tokens + 1):
        body = {"messages": [{"role": "user", "content": "a" + " a" * words}], **payload}
        if count_prompt(body) == prompt_tokens:
            return UpstreamCall("r", body, prompt_tokens * 7 + 1)
    raise AssertionError(f"no message of {prompt_tokens} tokens")


async def ttft_of(b: SimulatedBackend, c: UpstreamCall) -> float:
    started = time.perf_counter()
    stream = await b.stream(c)
    try:
        return time.perf_counter() - started
    finally:
        await stream.aclose()


def test_ttft_is_prefill_time() -> None:
    b = backend(prefill_tokens_per_s=10_000, tpot_ms=1)
    short = asyncio.run(ttft_of(b, call(100, stream=True)))
    long = asyncio.run(ttft_of(b, call(3000, stream=True)))
    assert short < 0.05
    assert 0.28 < long < 0.45   # 3,000 tokens at 10k tokens/s


def test_non_streamed_answer_reports_ttft_apart_from_latency() -> None:
    b = backend(prefill_tokens_per_s=10_000, tpot_ms=10)
    done = asyncio.run(b.complete(call(1000, max_tokens=20)))
    assert done.ttft_s is not None
    assert 0.08 < done.ttft_s < 0.2              # prefill: 1,000 tokens at 10k tokens/s
    assert done.latency_s > done.ttft_s + 0.1    # plus about 20 x 10 ms of decode


def test_requests_beyond_max_batch_queue() -> None:
    async def run() -> list[float]:
        b = backend(max_batch=2, tpot_ms=20, output_tokens_mean=5, prefill_tokens_per_s=1e6)
        async def one() -> float:
            started = time.perf_counter()
            await b.complete(call(10, max_tokens=5))
            return time.perf_counter() - started
        return sorted(await asyncio.gather(*(one() for _ in range(4))))
    durations = asyncio.run(run())
    # two run at once (~5 x 20 ms), the other two wait for a slot: about twice as long
    assert durations[-1] > 1.7 * durations[0]


def test_the_kv_cache_holds_prompts_and_outputs_until_they_finish() -> None:
    async def run() -> tuple[list[float], float]:
        b = backend(max_batch=2, tpot_ms=5, prefill_tokens_per_s=1e6)   # 2 x 4,096 tokens
        seen = []
        stream = await b.stream(call(1024, stream=True, max_tokens=50, ignore_eos=True))
        async for _ in stream:
            seen.append(b.engine.kv_usage())
        return seen, b.engine.kv_usage()
    seen, after = asyncio.run(run())
    assert seen[0] == pytest.approx(1024 / 8192, abs=2 / 8192)      # the prompt, held
    assert max(seen) == pytest.approx((1024 + 50) / 8192, abs=2 / 8192)   # and the output
    assert after == 0.0                                              # released when done
    full = backend(max_batch=2, kv_cache_tokens=100).engine
    full.stats.kv_tokens = 500
    assert full.kv_usage() == 1.0


def test_decode_slows_with_batch_size() -> None:
    async def tpot(concurrency: int) -> float:
        b = backend(tpot_ms=10, batch_slowdown=0.5, max_batch=64, prefill_tokens_per_s=1e6)
        async def one() -> float:
            c = await b.complete(call(10, max_tokens=20))
            return c.latency_s
        durations = await asyncio.gather(*(one() for _ in range(concurrency)))
        return sum(durations) / len(durations)
    alone, crowded = asyncio.run(tpot(1)), asyncio.run(tpot(8))
    assert crowded > 2.5 * alone   # 1 + 0.5 x 7 = 4.5x per token in theory


def test_usage_counts_the_tokens_sent() -> None:
    async def run() -> tuple[int, int, dict]:
        b = backend(tpot_ms=1)
        stream = await b.stream(call(42, max_tokens=7, stream=True,
                                     stream_options={"include_usage": True}))
        events = [e async for e in stream]
        await stream.aclose()
        tokens = sum(1 for e in events if e.has_tokens)
        data = events[-2].data
        assert data is not None
        usage = data["usage"]
        return tokens, usage["completion_tokens"], usage
    tokens, reported, usage = asyncio.run(run())
    assert tokens == reported <= 7
    assert usage["prompt_tokens"] == 42


@pytest.mark.parametrize("knob", ["error_rate", "drop_rate"])
def test_failures_are_injected(knob: str) -> None:
    async def run() -> None:
        b = backend(**{knob: 1.0, "tpot_ms": 1})
        stream = await b.stream(call(10, stream=True, max_tokens=20))
        async for _ in stream:
            pass
    with pytest.raises(UpstreamError):
        asyncio.run(run())


def test_invalid_json_rate_truncates_json() -> None:
    async def run(rate: float) -> str:
        b = backend(invalid_json_rate=rate, tpot_ms=1)
        c = await b.complete(call(10, response_format={"type": "json_object"}))
        return c.data["choices"][0]["message"]["content"]
    json.loads(asyncio.run(run(0.0)))
    with pytest.raises(json.JSONDecodeError):
        json.loads(asyncio.run(run(1.0)))


def test_correctness_draw_follows_predicted_quality() -> None:
    async def run(p: float) -> int:
        b = backend(tpot_ms=0.01, output_tokens_mean=1)
        for _ in range(200):
            await b.complete(UpstreamCall("r", {**MSG, "max_tokens": 1}, 5, p_correct=p))
        return b.engine.stats.correct
    assert asyncio.run(run(0.9)) > 150
    assert asyncio.run(run(0.1)) < 50


def test_timeout_rate_hangs_until_the_backend_timeout() -> None:
    config = ModelConfig(name="m", price=Price(input_per_mtok=1, output_per_mtok=1),
                         simulate=SimulateConfig(timeout_rate=1.0),
                         timeouts=Timeouts(first_byte_s=0.2, total_s=0.3))
    from core.errors import UpstreamTimeout
    with pytest.raises(UpstreamTimeout) as caught:          # non-streamed: total_s bounds it
        asyncio.run(SimulatedBackend(config).complete(call()))
    assert not caught.value.retryable                       # it was generating: never retried


def test_min_tokens_is_the_least_an_answer_or_a_tool_call_runs_to() -> None:
    """vLLM's ``min_tokens``: an answer goes on to at least that many tokens (and ends
    as it would, under ``max_tokens``); a tool call's arguments run on, still valid."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"unit": {"type": "string", "enum": ["c", "f"]},
                                         "path": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["path"]}}}]

    async def run(**payload: Any) -> tuple[int, str, dict]:
        done = await backend(tpot_ms=0.1, output_tokens_mean=1).complete(
            UpstreamCall("r", {**MSG, **payload}, 1))
        assert done.usage is not None
        choice = done.data["choices"][0]
        return done.usage.completion_tokens, choice["finish_reason"], choice["message"]
    assert asyncio.run(run(min_tokens=37, max_tokens=80))[:2] == (37, "stop")
    assert asyncio.run(run(min_tokens=120, max_tokens=80))[:2] == (80, "length")
    assert asyncio.run(run(min_tokens="37", max_tokens=80))[0] < 37   # not a count: ignored
    n, finish, message = asyncio.run(run(min_tokens=60, max_tokens=200, tools=tools,
                                         tool_choice="required"))
    arguments = json.loads(message["tool_calls"][0]["function"]["arguments"])
    assert finish == "tool_calls" and 60 <= n <= 62
    assert set(arguments) == {"unit", "path", "n"} and isinstance(arguments["path"], str)
    assert arguments["unit"] == "c"                     # an enum's value is not run on

"""The simulator's prefix cache, as vLLM's: blocks keyed by all before them, held by the
running requests in one KV pool with the cache, evicted least recently released first and
a prompt's tail before its head, looked up when the prefill starts; TTFT and usage."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import httpx

from backends.base import Completion, UpstreamCall
from core.config import ModelConfig, Price, SimulateConfig
from core.usage import Usage
from loadtest.servers import run_simulator
from sim.backend import SimulatedBackend
from sim.prefix_cache import BLOCK_TOKENS, PrefixCache, block_hashes


def backend(**simulate: Any) -> SimulatedBackend:
    return SimulatedBackend(ModelConfig(
        name="m", price=Price(input_per_mtok=1, output_per_mtok=1),
        simulate=SimulateConfig(**{"prefill_tokens_per_s": 5000, "tpot_ms": 1, "seed": 3,
                                   **simulate})))


def usage_of(done: Completion) -> Usage:
    assert done.usage is not None
    return done.usage


def served(cache: PrefixCache, blocks: list[bytes], other: int = 0) -> None:
    """A request that held ``blocks`` and ended."""
    cache.hold(blocks, other)
    cache.release(blocks, other)


def test_a_block_is_found_only_after_the_same_blocks() -> None:
    cache = PrefixCache(capacity_tokens=10_000)
    first = block_hashes(list(range(100)))           # 6 full blocks of 16
    assert len(first) == 100 // BLOCK_TOKENS
    served(cache, first)
    assert cache.lookup(block_hashes(list(range(100))), 100) == 96
    assert cache.lookup(block_hashes(list(range(100)) + [7] * 50), 150) == 96
    changed = block_hashes([1] + list(range(1, 100)))  # the first token differs
    assert cache.lookup(changed, 100) == 0
    # The last token is always computed, and a hit is whole blocks (vLLM V1).
    assert cache.lookup(first, 96) == 80 and cache.lookup(first, 97) == 96
    assert cache.queries == 100 + 150 + 100 + 96 + 97 and cache.hits == 96 + 96 + 80 + 96


def test_the_least_recently_released_blocks_leave_first_a_prompts_tail_before_its_head(
        ) -> None:
    cache = PrefixCache(capacity_tokens=4 * BLOCK_TOKENS)
    a, b = block_hashes(list(range(32))), block_hashes(list(range(1000, 1032)))
    served(cache, a)
    served(cache, b)
    served(cache, a)                                     # a used again: b is now the oldest
    served(cache, block_hashes(list(range(2000, 2032))))
    assert cache.lookup(a, 33) == 32 and cache.lookup(b, 33) == 0
    # Room for three blocks of a three-block prompt and one more: the tail goes first,
    # so what is left is still a prefix that finds its way in.
    cache = PrefixCache(capacity_tokens=3 * BLOCK_TOKENS)
    a = block_hashes(list(range(48)))
    served(cache, a)
    served(cache, block_hashes(list(range(5000, 5016))))
    assert cache.lookup(a, 49) == 32


def test_a_block_a_running_request_holds_is_not_evicted_and_counts_once() -> None:
    cache = PrefixCache(capacity_tokens=4 * BLOCK_TOKENS)
    a, b = block_hashes(list(range(48))), block_hashes(list(range(500, 564)))
    cache.hold(a)                                        # a runs
    cache.hold(a)                                        # and a second request of it
    assert cache.held_tokens == 48
    served(cache, b)                                     # b's blocks leave, not a's:
    assert cache.lookup(a, 49) == 48 and cache.lookup(b, 65) == 16   # its head fits beside
    cache.release(a)
    assert cache.held_tokens == 48                       # the second still holds them
    cache.release(a)
    assert cache.held_tokens == 0 and cache.lookup(a, 49) == 48
    # What the running requests hold besides (their partial blocks, their output) is
    # room the cache does not have: in one pool, the cache gives way.
    served(cache, b, other=2 * BLOCK_TOKENS)
    assert len(cache) <= 2 * BLOCK_TOKENS


def test_a_repeated_prompt_is_reported_cached_and_prefills_faster() -> None:
    sim = backend()
    body = {"messages": [{"role": "system", "content": "policy " * 3000},
                         {"role": "user", "content": "Summarise it."}], "max_tokens": 4}

    async def twice() -> list[tuple[float, int, int]]:
        out = []
        for _ in range(2):
            started = time.perf_counter()
            done = await sim.complete(UpstreamCall("r", body, 1))
            assert done.usage is not None and done.ttft_s is not None
            out.append((done.ttft_s, done.usage.prompt_tokens, done.usage.cached_tokens))
            assert time.perf_counter() - started >= done.ttft_s
        return out
    (ttft1, prompt1, cached1), (ttft2, prompt2, cached2) = asyncio.run(twice())
    assert prompt1 == prompt2 > 3000
    assert cached1 == 0 and prompt2 - BLOCK_TOKENS <= cached2 < prompt2
    assert cached2 % BLOCK_TOKENS == 0
    assert ttft1 > 0.5 and ttft2 < ttft1 / 5               # 3,000+ tokens at 5k/s, then ~16
    assert sim.served[-1]["cached_tokens"] == cached2
    assert sim.engine.stats.kv_tokens == 0 and sim.engine.prefix.held_tokens == 0


def test_requests_that_wait_behind_the_same_prompt_find_it_cached() -> None:
    """Three identical prompts at once: prefills run one at a time, and the cache is
    looked up when a request's turn comes, so only the first prefills it."""
    sim = backend()
    body = {"messages": [{"role": "system", "content": "policy " * 3000},
                         {"role": "user", "content": "Summarise it."}], "max_tokens": 2}

    async def burst() -> list[Any]:
        return list(await asyncio.gather(*(sim.complete(UpstreamCall(f"r{i}", body, 1))
                                           for i in range(3))))
    done = asyncio.run(burst())
    cached = sorted(d.usage.cached_tokens for d in done)
    prompt = done[0].usage.prompt_tokens
    assert cached[0] == 0 and cached[1] == cached[2] >= prompt - BLOCK_TOKENS
    assert max(d.ttft_s for d in done) < 2 * prompt / 5000   # one prefill, not three


def test_several_answers_prefill_the_prompt_once() -> None:
    sim = backend()
    body = {"messages": [{"role": "user", "content": "policy " * 3000}], "max_tokens": 2,
            "n": 3}
    started = time.perf_counter()
    done = asyncio.run(sim.complete(UpstreamCall("r", body, 1)))
    wall = time.perf_counter() - started
    prompt = usage_of(done).prompt_tokens
    assert usage_of(done).cached_tokens == 0                  # the first answer's, reported
    assert sim.engine.prefix.hits == 2 * ((prompt - 1) // BLOCK_TOKENS * BLOCK_TOKENS)
    assert wall < 1.5 * prompt / 5000


def test_a_different_image_is_a_different_prefix() -> None:
    sim = backend(prefill_tokens_per_s=50_000)

    def body(url: str) -> dict:
        return {"max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Look at this. " * 50},
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "Describe this picture in detail. " * 100}]}]}

    async def run() -> list[tuple[int, int]]:
        out = []
        for url in ("https://example.com/cat.png", "https://example.com/dog.png",
                    "https://example.com/dog.png"):
            d = await sim.complete(UpstreamCall("r", body(url), 1))
            out.append((usage_of(d).prompt_tokens, usage_of(d).cached_tokens))
        return out
    (p1, c1), (p2, c2), (p3, c3) = asyncio.run(run())
    assert p1 == p2 == p3 and c1 == 0
    assert 0 < c2 < 200                  # the text before the image only
    assert c3 >= p3 - BLOCK_TOKENS       # the image's tokens too, as vLLM caches them


def test_a_request_waiting_for_its_prefill_takes_no_room_from_the_cache() -> None:
    """Five prompts at once on a small KV cache, the third a prompt served before: those
    still waiting for their prefill hold no KV, so they do not evict it before its turn."""
    sim = backend(prefill_tokens_per_s=20_000, kv_cache_tokens=8192, max_batch=6)

    def call(ids: list[int], tokens: int = 1) -> UpstreamCall:
        return UpstreamCall("r", {"prompt": ids, "max_tokens": tokens, "ignore_eos": True}, 1,
                            route="completions")

    def prompt(k: int) -> list[int]:
        return list(range(k * 10_000, k * 10_000 + 1500))

    async def run() -> int:
        await sim.complete(call(prompt(0)))
        done = await asyncio.gather(*(sim.complete(call(prompt(k), 50)) for k in (1, 2, 0, 3, 4)))
        return usage_of(done[2]).cached_tokens
    assert asyncio.run(run()) == 1488
    assert sim.engine.stats.kv_tokens == 0 and sim.engine.prefix.held_tokens == 0


def test_each_legacy_prompt_of_a_list_is_a_prefix_of_its_own() -> None:
    P, Q = list(range(100, 140)), list(range(700, 740))    # 40 tokens each: 2 blocks

    def call(prompt: Any) -> UpstreamCall:
        return UpstreamCall("r", {"prompt": prompt, "max_tokens": 1}, 1, route="completions")

    async def run(*prompts: Any) -> int:
        sim = backend(prefill_tokens_per_s=50_000)
        done = None
        for prompt in prompts:
            done = await sim.complete(call(prompt))
        assert done is not None and done.usage is not None
        assert done.data["usage"]["prompt_tokens_details"]["cached_tokens"] == \
            done.usage.cached_tokens
        return done.usage.cached_tokens
    assert asyncio.run(run([P, Q], P + Q)) == 32       # P's blocks, not across the join
    assert asyncio.run(run([Q, P], [P])) == 32         # the second prompt was cached too
    assert asyncio.run(run([Q, P], [P, Q])) == 64


def test_the_running_requests_and_the_cache_share_the_kv_pool() -> None:
    """Two running requests of one 3,000-token prompt hold its blocks once; a request of
    the prompt a running one holds finds it, however small the pool."""
    sim = backend(prefill_tokens_per_s=50_000, tpot_ms=5, max_batch=4, kv_cache_tokens=64)
    A, B = list(range(100, 149)), list(range(500, 565))   # 3 and 4 full blocks

    def call(ids: list[int], tokens: int) -> UpstreamCall:
        return UpstreamCall("r", {"prompt": ids, "max_tokens": tokens, "ignore_eos": True}, 1,
                            route="completions")

    async def run() -> tuple[int, float]:
        running = asyncio.create_task(sim.complete(call(A, 100)))
        await asyncio.sleep(0.1)
        await sim.complete(call(B, 1))
        again = await sim.complete(call(A, 1))
        usage = sim.engine.kv_usage()
        await running
        return usage_of(again).cached_tokens, usage
    cached, usage = asyncio.run(run())
    assert cached == 48 and usage <= 1.0

    big = backend(prefill_tokens_per_s=50_000, tpot_ms=5, kv_cache_tokens=100_000)
    body = {"messages": [{"role": "user", "content": "policy " * 3000}], "max_tokens": 60,
            "ignore_eos": True}

    async def two() -> tuple[float, int]:
        tasks = [asyncio.create_task(big.complete(UpstreamCall(f"r{i}", body, 1)))
                 for i in range(2)]
        await asyncio.sleep(0.15)
        usage = big.engine.kv_usage()
        done = await asyncio.gather(*tasks)
        return usage, usage_of(done[0]).prompt_tokens
    usage, prompt = asyncio.run(two())
    # The prompt's blocks once, plus each sequence's partial block and output so far.
    assert prompt / 100_000 < usage < 1.1 * prompt / 100_000


def test_the_standalone_simulator_counts_prefix_tokens_as_vllm_and_can_keep_none() -> None:
    body = {"model": "default", "max_tokens": 2,
            "messages": [{"role": "user", "content": "policy " * 500}]}

    def counters(url: str) -> tuple[float, float, list[int]]:
        cached = []
        for _ in range(2):
            r = httpx.post(url + "/chat/completions", json=body, timeout=30)
            cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
        text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10).text

        def total(name: str) -> float:
            return sum(float(m) for m in re.findall(
                rf'^{name}_total{{[^}}]*model_name="default"[^}}]*}} (\S+)$', text, re.M))
        return total("vllm:prefix_cache_queries"), total("vllm:prefix_cache_hits"), cached
    with run_simulator() as url:
        queries, hits, cached = counters(url)
    assert cached[0] == 0 and cached[1] > 400 and hits == cached[1]
    assert queries > 2 * 500 and queries == 2 * (queries // 2)
    with run_simulator("--no-prefix-cache") as url:
        _, hits, cached = counters(url)
    assert cached == [0, 0] and hits == 0

"""The simulator's prefix cache, as vLLM's: blocks keyed by all before them, LRU, TTFT and usage."""

from __future__ import annotations

import asyncio
import time

from backends.base import UpstreamCall
from core.config import ModelConfig, Price, SimulateConfig
from sim.backend import SimulatedBackend
from sim.prefix_cache import BLOCK_TOKENS, PrefixCache, block_hashes


def test_a_block_is_found_only_after_the_same_blocks() -> None:
    cache = PrefixCache(capacity_tokens=10_000)
    first = block_hashes(list(range(100)))           # 6 full blocks of 16
    assert len(first) == 100 // BLOCK_TOKENS
    cache.insert(first)
    assert cache.lookup(block_hashes(list(range(100))), 100) == 96
    assert cache.lookup(block_hashes(list(range(100)) + [7] * 50), 150) == 96
    changed = block_hashes([1] + list(range(1, 100)))  # the first token differs
    assert cache.lookup(changed, 100) == 0
    assert cache.lookup(first, 96) == 95                # the last token is always computed
    assert cache.queries == 100 + 150 + 100 + 96 and cache.hits == 96 + 96 + 95


def test_the_least_recently_used_blocks_leave_first() -> None:
    cache = PrefixCache(capacity_tokens=4 * BLOCK_TOKENS)
    a, b = block_hashes(list(range(32))), block_hashes(list(range(1000, 1032)))
    cache.insert(a)
    cache.insert(b)
    assert cache.lookup(a, 33) == 32                     # a used again: b is now the oldest
    cache.insert(block_hashes(list(range(2000, 2032))))
    assert cache.lookup(a, 33) == 32 and cache.lookup(b, 33) == 0


def test_a_repeated_prompt_is_reported_cached_and_prefills_faster() -> None:
    backend = SimulatedBackend(ModelConfig(
        name="m", price=Price(input_per_mtok=1, output_per_mtok=1),
        simulate=SimulateConfig(prefill_tokens_per_s=5000, tpot_ms=1, seed=3)))
    body = {"messages": [{"role": "system", "content": "policy " * 3000},
                         {"role": "user", "content": "Summarise it."}], "max_tokens": 4}

    async def twice() -> list[tuple[float, int, int]]:
        out = []
        for _ in range(2):
            started = time.perf_counter()
            done = await backend.complete(UpstreamCall("r", body, 1))
            assert done.usage is not None and done.ttft_s is not None
            out.append((done.ttft_s, done.usage.prompt_tokens, done.usage.cached_tokens))
            assert time.perf_counter() - started >= done.ttft_s
        return out
    (ttft1, prompt1, cached1), (ttft2, prompt2, cached2) = asyncio.run(twice())
    assert prompt1 == prompt2 > 3000
    assert cached1 == 0 and prompt2 - BLOCK_TOKENS <= cached2 < prompt2
    assert ttft1 > 0.5 and ttft2 < ttft1 / 5               # 3,000+ tokens at 5k/s, then ~16
    assert backend.served[-1]["cached_tokens"] == cached2

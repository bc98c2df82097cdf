"""A model server's serving physics, without the model.

    engine = SimEngine("small", SimulateConfig(prefill_tokens_per_s=8000, tpot_ms=15))
    async for chunk in engine.generate(payload, prompt_tokens=300, difficulty=0.4):
        ...   # OpenAI chat.completion.chunk dicts

What it models, after continuous-batching servers such as vLLM:
- admission: at most ``max_batch`` sequences run; the rest queue (FIFO);
- the KV cache (``kv_cache_tokens``, by default KV_TOKENS_PER_SLOT per slot)
  holds each running sequence's prompt, from its prefill on, and the tokens it
  has generated; it is read (``kv_usage``), it does not admit: a server sized
  for its batch;
- prefill is compute-bound, so prompts are prefilled one at a time:
  TTFT = queue wait + uncached prompt tokens / prefill_tokens_per_s, where a
  prompt's prefix still in the prefix cache (``prefix_cache.py``, vLLM's
  automatic prefix caching) is not prefilled again. The cache is looked up
  when the prefill starts, so a request that waited behind the same prompt
  finds it; the cache and the running sequences share the KV cache (unless
  ``prefix_cache_tokens`` sizes the cache apart): a block several sequences
  share is held once, and a block a running sequence holds is never evicted;
- decode is memory-bound and shared: each step takes
  tpot_ms × (1 + batch_slowdown × (sequences decoding − 1)).
Failure injection (5xx, hang, mid-stream drop, invalid JSON) is drawn per
request from the config's rates. Whether the answer is "correct" is drawn from
the model's ability and the prompt's predicted difficulty, for quality experiments.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from core.config import SimulateConfig
from sim.content import Draft, draft_answer, min_tokens
from sim.prefix_cache import PrefixCache

# The default KV cache per batch slot, in tokens: a 4k context per sequence.
KV_TOKENS_PER_SLOT = 4096


class SimFailure(Exception):
    """An injected failure: ``status`` is the HTTP status a server would send
    (0 means the connection drops mid-stream)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class SimStats:
    requests: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    queued: int = 0
    running: int = 0          # holding one of the max_batch slots (prefill or decode)
    prefill_queued: int = 0   # holding a slot, waiting for the (one at a time) prefill
    decoding: int = 0
    kv_tokens: int = 0        # prompt + generated tokens the running sequences hold
    correct: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: list[float] = field(default_factory=list)

    def snapshot(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "ttft_s"}
        data["mean_ttft_s"] = sum(self.ttft_s) / len(self.ttft_s) if self.ttft_s else None
        return data


@dataclass
class Prompt:
    """What the server read of one request's prompt: its cache blocks, and how many of its
    tokens the prefix cache held (set at the prefill); ``held``: its blocks are held in
    the cache while it runs (released at its end)."""

    blocks: list[bytes]
    cached: int = 0
    held: bool = False


class SimEngine:
    def __init__(self, name: str, config: SimulateConfig, ability: float = 0.5) -> None:
        self.name = name
        self.config = config
        self.ability = ability
        self.stats = SimStats()
        self._rng = random.Random(config.seed)
        self._slots = asyncio.Semaphore(config.max_batch)
        self._prefill = asyncio.Lock()
        self.kv_capacity = config.kv_cache_tokens or KV_TOKENS_PER_SLOT * config.max_batch
        self.prefix = PrefixCache(config.prefix_cache_tokens or self.kv_capacity)
        self._shared_kv = config.prefix_cache_tokens is None   # the cache in the KV pool

    def kv_usage(self) -> float:
        """The share of the KV cache the running sequences hold, 0..1 (vLLM's
        ``kv_cache_usage_perc``), their shared prefix blocks once. The cache is a reading
        only: admission is by slots."""
        return min(1.0, (self.stats.kv_tokens + self.prefix.held_tokens) / self.kv_capacity)

    def _besides(self) -> int:
        """KV tokens the running sequences hold outside the cache's blocks, where they
        share its pool."""
        return self.stats.kv_tokens if self._shared_kv else 0

    def _draw(self, rate: float) -> bool:
        return rate > 0 and self._rng.random() < rate

    def _output_tokens(self, payload: dict[str, Any]) -> int:
        limit = payload.get("max_completion_tokens") or payload.get("max_tokens")
        if limit and payload.get("ignore_eos"):
            # vLLM's extension: generate exactly max_tokens (trace replays use it).
            return int(limit)
        mean = self.config.output_tokens_mean
        n = max(1, int(self._rng.lognormvariate(math.log(mean), 0.5)), min_tokens(payload))
        return min(n, int(limit)) if limit else n

    def _tpot(self) -> float:
        extra = max(0, self.stats.decoding - 1)
        return self.config.tpot_ms / 1000 * (1 + self.config.batch_slowdown * extra)

    async def _prefill_cached(self, prompt: Prompt | None, prompt_tokens: int, started: float,
                              held: list[int]) -> None:
        """One prompt at a time, as a GPU's prefill is (counted while it waits), less a
        prefix its cache holds once its turn comes; its blocks are then held in the cache
        (``held``: the sequence's KV tokens outside them)."""
        self.stats.prefill_queued += 1
        try:
            await self._prefill.acquire()
        finally:
            self.stats.prefill_queued -= 1
        try:
            # Its KV is taken when its prefill starts (one waiting for it holds none, and
            # takes no room from the cache).
            held[0] += prompt_tokens
            self.stats.kv_tokens += prompt_tokens
            cached = 0
            if prompt is not None and self.config.prefix_cache:
                cached = prompt.cached = self.prefix.lookup(prompt.blocks, prompt_tokens)
                in_blocks = len(prompt.blocks) * self.prefix.block
                held[0] -= in_blocks
                self.stats.kv_tokens -= in_blocks
                self.prefix.hold(prompt.blocks, self._besides())
                prompt.held = True
            await asyncio.sleep((prompt_tokens - cached) / self.config.prefill_tokens_per_s)
        finally:
            self._prefill.release()
        self.stats.ttft_s.append(time.perf_counter() - started)
        del self.stats.ttft_s[:-1000]

    async def generate(
        self, payload: dict[str, Any], *, prompt_tokens: int, p_correct: float | None = None,
        prompt: Prompt | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Yield choice dicts (delta, finish_reason, logprobs), one per output token.

        ``p_correct`` is the gateway's prediction for this prompt on this model
        (ability and predicted difficulty); without one the model's ability is used.
        """
        cfg = self.config
        self.stats.requests += 1
        if self._draw(cfg.error_rate):
            self.stats.failed += 1
            raise SimFailure(500, "simulated server error")
        hang = self._draw(cfg.timeout_rate)
        started = time.perf_counter()
        self.stats.queued += 1
        try:
            await self._slots.acquire()
        finally:
            self.stats.queued -= 1
        self.stats.running += 1
        held = [0]               # the prompt once its prefill starts, then one per token
        try:
            if hang:
                await asyncio.sleep(3600)
            await self._prefill_cached(prompt, prompt_tokens, started, held)
            correct = self._rng.random() < (self.ability if p_correct is None else p_correct)
            draft = draft_answer(
                payload, self._output_tokens(payload), correct=correct,
                invalid_json=self._draw(cfg.invalid_json_rate), rng=self._rng,
                invalid_args=self._draw(cfg.invalid_tool_args_rate),
                logprob_mean=cfg.logprob_mean,
            )
            drop_at = self._rng.randrange(len(draft.pieces)) if self._draw(cfg.drop_rate) else -1
            async for chunk in self._decode(draft, drop_at, held):
                yield chunk
            self.stats.completed += 1
            self.stats.correct += correct
            self.stats.prompt_tokens += prompt_tokens
            self.stats.completion_tokens += len(draft.pieces)
        except (asyncio.CancelledError, GeneratorExit):
            self.stats.cancelled += 1
            raise
        finally:
            self._leave(prompt, held[0])

    def _leave(self, prompt: Prompt | None, held: int) -> None:
        """A sequence ends: its slot, its KV tokens and its cache blocks go back."""
        self.stats.running -= 1
        self.stats.kv_tokens -= held
        if prompt is not None and prompt.held:
            prompt.held = False
            self.prefix.release(prompt.blocks, self._besides())
        self._slots.release()

    async def _decode(self, draft: Draft, drop_at: int, held: list[int]
                      ) -> AsyncIterator[dict[str, Any]]:
        self.stats.decoding += 1
        try:
            yield {"delta": {"role": "assistant", "content": ""}}
            for i, piece in enumerate(draft.pieces):
                if i == drop_at:
                    self.stats.failed += 1
                    raise SimFailure(0, "simulated connection drop")
                yield {"delta": piece, "logprobs": draft.logprobs[i] if draft.logprobs else None}
                held[0] += 1
                self.stats.kv_tokens += 1
                await asyncio.sleep(self._tpot())
            yield {"delta": {}, "finish_reason": draft.finish_reason}
        finally:
            self.stats.decoding -= 1

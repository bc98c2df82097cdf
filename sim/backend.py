"""The simulator as a backend: in-process for the demo fleet, and the core of
the standalone server (``python -m sim.server``).

    backend = SimulatedBackend(model_config)
    stream = await backend.stream(UpstreamCall("r1", {"messages": [...], "stream": True}, 40))
    async for event in stream: print(event.raw)

It speaks exactly OpenAI's wire format (chat.completion and
chat.completion.chunk), so the gateway relays it like any other upstream.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import orjson

from backends.base import Completion, LiveStats, UpstreamCall, Usage
from backends.sse import DONE, SSEEvent
from backends.stream import MeteredStream, StreamMeter
from core.config import ModelConfig, SimulateConfig
from core.errors import GatewayError, UpstreamError, UpstreamTimeout
from sim.count import encoding, prompt_of
from sim.engine import Prompt, SimEngine, SimFailure
from sim.prefix_cache import block_hashes
from sim.shapes import CHAT, TEXT, chunk, embeddings, text_answer, usage


def assemble_message(choices: list[dict[str, Any]]) -> tuple[dict[str, Any], str, Any]:
    """Fold streamed deltas into one assistant message, as a non-stream answer has."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    logprobs: list[Any] = []
    finish = "stop"
    for choice in choices:
        delta = choice["delta"]
        if delta.get("content"):
            content.append(delta["content"])
        for tc in delta.get("tool_calls") or ():
            slot = calls.setdefault(tc["index"], {"id": tc.get("id"), "type": "function",
                                                  "function": {"name": "", "arguments": ""}})
            fn = tc.get("function") or {}
            slot["function"]["name"] += fn.get("name") or ""
            slot["function"]["arguments"] += fn.get("arguments") or ""
        if choice.get("logprobs"):
            logprobs.extend(choice["logprobs"]["content"])
        finish = choice.get("finish_reason") or finish
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) if content else None,
                               "refusal": None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message, finish, ({"content": logprobs, "refusal": None} if logprobs else None)


# Requests the simulator remembers what it counted for (``SimulatedBackend.served``).
SERVED_KEPT = 10_000


@dataclass
class Prompts:
    """A request's prompts as this server read them: one for chat, one per prompt of a
    legacy list; each one's blocks, and its tokens."""

    each: list[Prompt]
    tokens: list[int]

    @property
    def cached(self) -> int:
        """Prompt tokens read from the prefix cache, each prompt's first answer's."""
        return sum(p.cached for p in self.each)


class SimulatedBackend:
    def __init__(self, model: ModelConfig) -> None:
        self.name = model.name
        self.stats = LiveStats()
        # What this server counted for each request it took (its bill, as an honest
        # upstream's own records): {"id", "route", "model", "prompt_tokens",
        # "completion_tokens", "finished"}; a request that failed before any token
        # is not here. The money tests compare the gateway's bills with these.
        self.served: deque[dict[str, Any]] = deque(maxlen=SERVED_KEPT)
        self.engine = SimEngine(model.name, model.simulate or SimulateConfig(), model.ability)
        encoding()     # loaded at start-up, not in the first request's time to first token
        self._first_byte_s = model.timeouts.first_byte_s
        self._total_s = model.timeouts.total_s

    def _chunks(self, call: UpstreamCall, prompts: Prompts
                ) -> AsyncGenerator[dict[str, Any], None]:
        """Choice deltas; with ``n`` > 1, each answer in turn, tagged with its ``index``
        (as vLLM and OpenAI answer ``n``: usage counts every answer's tokens); a list
        of legacy prompts, ``n`` answers for each prompt in turn, as OpenAI numbers them."""
        n = call.payload.get("n")
        n = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
        if n * len(prompts.each) <= 1:
            return self.engine.generate(call.payload, prompt_tokens=call.prompt_tokens,
                                        p_correct=call.p_correct, prompt=prompts.each[0])
        return self._several(call, n, prompts)

    async def _several(self, call: UpstreamCall, n: int, prompts: Prompts
                       ) -> AsyncGenerator[dict[str, Any], None]:
        for index in range(n * len(prompts.each)):
            prompt = prompts.each[index // n]
            # The prompt's first answer prefills it; the others find it in the cache
            # (what they find is not reported again: vLLM prefills a prompt once for n).
            twin = prompt if index % n == 0 else Prompt(prompt.blocks)
            tokens = prompts.tokens[index // n]
            async for choice in self.engine.generate(call.payload, prompt_tokens=tokens,
                                                     p_correct=call.p_correct, prompt=twin):
                yield {**choice, "index": index}

    def _convert(self, exc: BaseException, *, generating: bool = False) -> GatewayError:
        self.stats.observe_failure()
        if isinstance(exc, TimeoutError):
            # As for a remote upstream: a non-streamed answer is bounded by
            # total_s, and running out of it is never retried (it was generating).
            return UpstreamTimeout(f"model {self.name} timed out", generating=generating)
        if isinstance(exc, SimFailure) and exc.status:
            return UpstreamError(f"model {self.name} failed with HTTP {exc.status}",
                                 upstream_status=exc.status)
        return UpstreamError(f"model {self.name} failed: connection lost")

    def record(self, call: UpstreamCall, completion_tokens: int, finished: str,
               prompts: Prompts | None = None) -> None:
        self.served.append({"id": call.request_id, "route": call.route,
                            "model": call.payload.get("model"),
                            "prompt_tokens": call.prompt_tokens,
                            "cached_tokens": prompts.cached if prompts is not None else 0,
                            "completion_tokens": completion_tokens, "finished": finished})

    def _received(self, call: UpstreamCall) -> tuple[UpstreamCall, Prompts]:
        """The call with the prompt counted as this server counts what it received
        (``sim/count.py``), never the gateway's figure: usage reports this count; and
        each of its prompts' prefix-cache blocks."""
        tokens, keys = prompt_of(call.payload, call.route)
        each, counts = [], []
        for ids in keys:
            try:
                blocks = block_hashes(ids)
            except (OverflowError, TypeError):    # token ids no tokenizer has
                blocks = []
            each.append(Prompt(blocks))
            counts.append(len(ids) if len(keys) > 1 else tokens)
        return replace(call, prompt_tokens=tokens), Prompts(each, counts)

    async def complete(self, call: UpstreamCall) -> Completion:
        call, prompts = self._received(call)
        if call.route == "embeddings":
            return await self._embed(call)
        started = time.perf_counter()
        self.stats.in_flight += 1
        first_at = 0.0
        choices: list[dict[str, Any]] = []
        try:
            async with asyncio.timeout(call.bound_s(self._total_s)):
                async for choice in self._chunks(call, prompts):
                    first_at = first_at or time.perf_counter()
                    choices.append(choice)
        except (SimFailure, TimeoutError) as exc:
            if first_at:
                self.record(call, _tokens_in(choices), "failed", prompts)
            raise self._convert(exc, generating=isinstance(exc, TimeoutError)) from None
        except asyncio.CancelledError:
            if first_at:
                self.record(call, _tokens_in(choices), "cancelled", prompts)
            raise
        finally:
            self.stats.in_flight -= 1
        answers: dict[int, list[dict[str, Any]]] = {}
        for choice in choices:
            answers.setdefault(choice.get("index", 0), []).append(choice)
        out = []
        for index, deltas in sorted(answers.items()):
            message, finish, logprobs = assemble_message(deltas)
            out.append({"index": index, "message": message, "logprobs": logprobs,
                        "finish_reason": finish})
        n_out = _tokens_in(choices)
        self.record(call, n_out, "completed", prompts)
        model, created = call.payload.get("model", self.name), int(time.time())
        if call.route == "completions":
            data = text_answer(model, created, answers, call.prompt_tokens, n_out, prompts.cached)
        else:
            data = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
                    "created": created, "model": model, "system_fingerprint": "routegate-sim",
                    "choices": out, "usage": usage(call.prompt_tokens, n_out, prompts.cached)}
        elapsed = time.perf_counter() - started
        ttft = first_at - started
        self.stats.requests += 1
        self.stats.observe_ttft(ttft)
        if n_out > 1:
            self.stats.observe_tpot(max(0.0, elapsed - ttft) / n_out)
        return Completion(orjson.dumps(data), data,
                          Usage(call.prompt_tokens, n_out, cached_tokens=prompts.cached), elapsed,
                          ttft)

    async def _embed(self, call: UpstreamCall) -> Completion:
        """Vectors after the prompt's prefill time: an embedding model only reads."""
        started = time.perf_counter()
        self.stats.in_flight += 1
        try:
            async with asyncio.timeout(call.bound_s(self._total_s)):
                await asyncio.sleep(call.prompt_tokens / self.engine.config.prefill_tokens_per_s)
        except TimeoutError as exc:
            raise self._convert(exc, generating=True) from None
        finally:
            self.stats.in_flight -= 1
        data = embeddings(call.payload, prompt_tokens=call.prompt_tokens,
                          dimensions=self.engine.config.embedding_dimensions)
        self.record(call, 0, "completed")
        elapsed = time.perf_counter() - started
        self.stats.requests += 1
        self.stats.observe_ttft(elapsed)
        return Completion(orjson.dumps(data), data, Usage(call.prompt_tokens, 0), elapsed, elapsed)

    async def stream(self, call: UpstreamCall) -> SimChunkStream:
        stream = SimChunkStream(self, *self._received(call))
        self.stats.in_flight += 1
        try:
            async with asyncio.timeout(self._first_byte_s):
                await stream.prime()
        except BaseException as exc:
            await stream.aclose()
            if isinstance(exc, SimFailure | TimeoutError):
                raise self._convert(exc) from None
            raise
        return stream

    async def ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None


def _tokens_in(choices: list[dict[str, Any]]) -> int:
    """Output tokens among generated deltas: each answer's first delta is its role."""
    return sum(1 for c in choices if c["delta"] and "role" not in c["delta"])


class SimChunkStream(MeteredStream):
    def __init__(self, backend: SimulatedBackend, call: UpstreamCall, prompts: Prompts) -> None:
        self._backend = backend
        self._call = call
        self._prompts = prompts
        self._gen = backend._chunks(call, prompts)
        self._meter = StreamMeter(backend.stats)
        opts = call.payload.get("stream_options") or {}
        self._with_usage = bool(opts.get("include_usage"))
        self._kind = TEXT if call.route == "completions" else CHAT
        self._cid = f"{'cmpl' if self._kind == TEXT else 'chatcmpl'}-{uuid.uuid4().hex[:24]}"
        self._created = int(time.time())
        self._model = call.payload.get("model", backend.name)
        self._first: dict[str, Any] | None = None
        self._n_out = 0
        self._recorded = False
        self._stats = backend.stats

    buffered = False   # each simulated token arrives on its own

    async def prime(self) -> None:
        self._first = await self._gen.__anext__()

    def _event(self, choice: dict[str, Any] | None) -> SSEEvent:
        event = SSEEvent.from_data(chunk(self._kind, self._cid, self._created, self._model,
                                         choice, self._with_usage))
        self._meter.observe(event)
        return event

    async def __aiter__(self) -> AsyncIterator[SSEEvent]:
        try:
            if self._first is not None:
                yield self._event(self._first)
            async for choice in self._gen:
                self._n_out += bool(choice["delta"]) and "role" not in choice["delta"]
                yield self._event(choice)
        except SimFailure as exc:
            self._recorded = True
            self._backend.record(self._call, self._n_out, "failed", self._prompts)
            raise self._backend._convert(exc) from None
        self._recorded = True
        self._backend.record(self._call, self._n_out, "completed", self._prompts)
        counts = usage(self._call.prompt_tokens, self._n_out, self._prompts.cached)
        self._meter.usage = Usage(counts["prompt_tokens"], counts["completion_tokens"],
                                  cached_tokens=self._prompts.cached)
        if self._with_usage:
            final = chunk(self._kind, self._cid, self._created, self._model, None, False)
            final["usage"] = counts
            yield SSEEvent.from_data(final)
        self._meter.done = True
        yield SSEEvent(DONE, None, done=True)

    async def aclose(self) -> None:
        if not self._close_once():
            return
        if not self._recorded and self._first is not None:     # the client left mid-stream
            self._recorded = True
            self._backend.record(self._call, self._n_out, "cancelled", self._prompts)
        await self._gen.aclose()  # cancels a generation still in progress

"""What routing needs to know about a request: token counts and complexity.

    features = await measure(req, encodings={"o200k_base"}, scorer=None)
    features.prompt_tokens("o200k_base")

Counting is exact (tiktoken) and done once per encoding per request, over
everything the model reads: messages, images, tools and the response schema
(``classifiers/prompt.py``). A large request is counted in a worker thread
(tiktoken releases the GIL), so it never stalls the event loop for others.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from classifiers.length import TOKENS_PER_REPLY, TokenCounter, counter_for, message_text
from classifiers.pair_heads import chained
from classifiers.prompt import structured_tokens
from core.model_config import HOUR_CACHES
from gateway.money.ceiling import Demand
from gateway.pipeline.prompt_prefix import (
    has_breakpoints,
    head_length,
    kept_at_breakpoints,
    marks_an_hour,
    prefix_chain,
)
from gateway.pipeline.request import EMBEDDING, ModelRequest
from gateway.pipeline.warm import Warm

if TYPE_CHECKING:
    from classifiers.complexity import ComplexityModel, PromptScore
    from core.config import GatewayConfig, ModelFacts

log = logging.getLogger("routegate.classifier")

# Above this many body bytes the work moves off the event loop (~1 ms of tiktoken).
LONG_PROMPT_BYTES = 16_000
# Expected output length when the client gives no max_tokens.
DEFAULT_EXPECTED_OUTPUT = 256


@dataclass(frozen=True, slots=True)
class Scorer:
    """A complexity model, and what it knows of the config's models by name.

    A model from ``routegate learn`` on this fleet's traffic knows its models
    by their config names: their learned ability and offsets replace the
    config's ``ability`` and ``family``."""

    model: ComplexityModel
    terms: dict[str, tuple[float, str | None]]
    pairs: bool = False          # some pair head decides between two of the config's models

    @classmethod
    def of(cls, model: ComplexityModel, config: GatewayConfig) -> Scorer:
        terms = {m.name: model.learned_terms(m.name) or (m.ability, m.family)
                 for m in config.models}
        ladder = model.pair_ladder
        usable = model.pairs_among(terms)
        if len(usable) < len(ladder) - 1:
            # Label names are free: a learned ladder may name no model of this config. Its
            # heads then decide nothing here, and cost the request path nothing either.
            log.warning("the classifier's pair heads along %s: %d of its %d pairs are "
                        "between two configured models; the others are not used",
                        ladder, len(usable), len(ladder) - 1)
        return cls(model, terms, bool(usable))

    def p_correct(self, score: PromptScore, model: ModelFacts) -> float:
        """P(correct) of ``model``; on a ladder with pair heads (``routegate learn``), the
        top model's P less the gains of the pairs down to it (``pair_heads.chained``)."""
        if score.pair_gains is not None and model.name in self.model.pair_ladder:
            ladder = self.model.pair_ladder
            irt = {name: self._irt(score, name) for name in ladder if name in self.terms}
            return chained(irt, ladder, score.pair_gains)[model.name]
        ability, family = self.terms.get(model.name, (model.ability, model.family))
        return self.model.p_correct(score, ability, family)

    def _irt(self, score: PromptScore, name: str) -> float:
        ability, family = self.terms[name]
        return self.model.p_correct(score, ability, family)


@dataclass(slots=True)
class RequestFeatures:
    token_counts: dict[str, int]
    expected_output_tokens: int
    demand: Demand                       # what the request asks, for its ceiling (money)
    score: PromptScore | None = None
    classify_s: float | None = None      # time in the classifier (a metric)
    scorer: Scorer | None = None         # what produced ``score``
    chain: list[bytes] | None = None     # the prompt's prefix chain (prompt_prefix.py)
    # Its head (tools and leading system messages, prompt_prefix.head_length): the
    # chain's hash there, and its tokens per encoding. None: it has none.
    head: tuple[bytes, dict[str, int]] | None = None
    # Per model, the longest prefix of this prompt it served lately (warm.py): what its
    # upstream probably still caches.
    warm: dict[str, Warm] = field(default_factory=dict)
    breakpoints: bool = False            # its chat body marks cache_control (has_breakpoints)
    native_breakpoints: bool | None = None   # its door's own body does (None: it has none)
    # What an upstream that caches at breakpoints keeps of it (prompt_prefix.kept_at_breakpoints):
    # (the whole prompt, its head), from the chat body and from the door's own.
    kept: tuple[bool, bool] = (False, False)
    native_kept: tuple[bool, bool] | None = None
    # A breakpoint marks ttl "1h" (prompt_prefix.marks_an_hour): in the chat body, in the
    # door's own.
    hour: bool = False
    native_hour: bool = False

    def prompt_tokens(self, encoding: str) -> int:
        return self.token_counts[encoding]

    def cached_tokens(self, model: ModelFacts) -> int:
        """The prompt tokens ``model``'s upstream probably holds cached (never the whole
        prompt: at least one token is read anew): none where it keeps no prefix cache,
        or caches only at breakpoints and this request marks none."""
        warm = self.warm.get(model.name) if self.warm else None
        if warm is None or model.prefix_cache == "none" or (
                model.prefix_cache == "breakpoints" and not self._marked_for(model)):
            return 0
        return max(0, min(warm.tokens, self.prompt_tokens(model.tokenizer) - 1))

    def _marked_for(self, model: ModelFacts) -> bool:
        """Whether what goes to ``model`` marks breakpoints: an ``anthropic`` model gets
        the Messages door's own body (``NativeRequest``), every other the chat body."""
        if self.native_breakpoints is not None and model.backend == "anthropic":
            return self.native_breakpoints
        return self.breakpoints

    def kept_by(self, model: ModelFacts) -> tuple[bool, bool]:
        """What ``model``'s upstream holds of this prompt once it has served it: (the
        whole prompt, its head). Both, but on an upstream that caches only at breakpoints:
        what this request marks there."""
        if model.prefix_cache != "breakpoints":
            return True, True
        whole, head = (self.native_kept if self.native_kept is not None
                       and model.backend == "anthropic" else self.kept)
        least = model.cache_min_tokens       # a shorter prefix is written to no cache
        return (whole and self.prompt_tokens(model.tokenizer) >= least,
                head and self.head is not None
                and self.head[1].get(model.tokenizer, 0) >= least)

    def written_tokens(self, model: ModelFacts, cached: int) -> int:
        """The prompt tokens ``model``'s upstream will write to its cache, billed at the
        cache-write price: on an upstream that caches at breakpoints, what this request
        marks beyond what it reads (the whole prompt, or its head). Elsewhere none is
        billed apart."""
        if model.prefix_cache != "breakpoints" or not (self.breakpoints or self.native_breakpoints):
            return 0
        whole, head = self.kept_by(model)
        if whole:
            return self.prompt_tokens(model.tokenizer) - cached
        if head and self.head is not None:
            return max(0, self.head[1].get(model.tokenizer, 0) - cached)
        return 0

    def writes_an_hour(self, model: ModelFacts) -> bool:
        """Whether ``model``'s upstream bills this request's cache writes at the hour's
        price: an upstream that keeps a prefix an hour when asked (``HOUR_CACHES``:
        Anthropic), and a breakpoint in what goes to it that asks."""
        if model.backend not in HOUR_CACHES:
            return False
        return self.native_hour if self.native_breakpoints is not None else self.hour

    def prefill_tokens(self, model: ModelFacts) -> int:
        """What ``model`` must prefill: the prompt less what it probably caches."""
        return self.prompt_tokens(model.tokenizer) - self.cached_tokens(model)


def count_prompt(req: ModelRequest, counter: TokenCounter) -> int:
    """The prompt as the model reads it: the messages in the chat template (with
    their images), the tools and the response schema; or raw texts (embeddings,
    legacy completions); plus any prompt given as token ids."""
    if req.templated:
        return (counter.count_messages(req.messages) + structured_tokens(req.body, counter)
                + req.extra_prompt_tokens)
    return sum(counter.count_text(message_text(m.get("content"))) for m in req.messages
               ) + req.extra_prompt_tokens


def count_with_head(req: ModelRequest, counter: TokenCounter, k: int) -> tuple[int, int]:
    """``count_prompt`` of a templated request, and of its first ``k`` messages with its
    tools and schema (its head), in one pass over the text: the messages are counted in
    two runs, the reply's framing once."""
    head = counter.count_messages(req.messages[:k]) + structured_tokens(req.body, counter)
    rest = counter.count_messages(req.messages[k:]) - TOKENS_PER_REPLY
    return head + rest + req.extra_prompt_tokens, head - TOKENS_PER_REPLY


def _scored(req: ModelRequest, scorer: Scorer) -> tuple[PromptScore, float]:
    """The complexity score and the seconds it took (its window is bounded: the cost
    does not grow with the prompt)."""
    started = time.perf_counter()
    score = scorer.model.score_messages(req.messages, has_tools=req.has_tools,
                                        has_response_format=req.has_response_format,
                                        pairs=scorer.pairs)
    return score, time.perf_counter() - started


def _measure_sync(req: ModelRequest, encodings: set[str], scorer: Scorer | None,
                  chain: bool = False) -> RequestFeatures:
    cache_aware = chain and req.templated
    messages = req.body.get("messages")
    # The head is the chain's: counted only where the counted messages are the body's.
    k = head_length(messages) if cache_aware and messages is req.messages else 0
    heads: dict[str, int] = {}
    if k:
        counts = {}
        for enc in encodings:
            counts[enc], heads[enc] = count_with_head(req, counter_for(enc), k)
    else:
        counts = {enc: count_prompt(req, counter_for(enc)) for enc in encodings}
    score, spent = _scored(req, scorer) if scorer is not None else (None, None)
    expected = req.max_tokens or DEFAULT_EXPECTED_OUTPUT
    demand = Demand(counts, len(req.messages), req.max_tokens, req.choices,
                    generates=req.operation != EMBEDDING,
                    inputs=1 if req.templated else len(req.messages))
    hashes = prefix_chain(req.body) if cache_aware else None
    marked = cache_aware and has_breakpoints(req.body)
    native = req.native.body if cache_aware and req.native is not None else None
    native_marked = native is not None and has_breakpoints(native)
    return RequestFeatures(counts, expected, demand, score, classify_s=spent, scorer=scorer,
                           chain=hashes, head=(hashes[k - 1], heads) if hashes and k else None,
                           breakpoints=marked,
                           native_breakpoints=None if native is None else native_marked,
                           kept=kept_at_breakpoints(req.body, k) if marked else (False, False),
                           native_kept=None if native is None else (
                               kept_at_breakpoints(native, 0) if native_marked
                               else (False, False)),
                           hour=marked and marks_an_hour(req.body),
                           native_hour=native is not None and native_marked and marks_an_hour(native))


async def measure(req: ModelRequest, encodings: set[str], scorer: Scorer | None,
                  chain: bool = False) -> RequestFeatures:
    """``scorer``: None when the request needs no complexity score. ``chain``: hash its
    prefix chain, for cache-aware routing."""
    if req.size <= LONG_PROMPT_BYTES:
        return _measure_sync(req, encodings, scorer, chain)
    # The counts and the prefix's hashes in a thread (tiktoken and hashlib let go of
    # the GIL there); the score, whose cost is bounded, here: in the thread it held
    # the GIL as long and its time was the thread's wait for it (6,000 tokens in
    # loadtest.bench_classifier --served: p99 <= 5 ms there, <= 1.5 ms here).
    features = await asyncio.to_thread(_measure_sync, req, encodings, None, chain)
    if scorer is not None:
        features.score, features.classify_s = _scored(req, scorer)
        features.scorer = scorer
    return features

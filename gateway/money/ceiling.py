"""The one rule for what a request may cost, and what is billed for it.

    tariff = Tariff(config)                                      # on the app state
    ceiling = tariff.ceiling(model, demand, rate)                # reserve: per model of the ladder
    billed = tariff.bill(ceiling, reported, demand, estimate)    # settle: per attempt that answered
    billed.usage, billed.cost, billed.anomaly

A request's **ceiling** on one model is what is reserved for it there: the
prompt as we count it (everything the model reads: messages, images, tools,
the response schema; ``gateway/pipeline/features.py``), widened by how that
model's upstream was seen to count this team's prompts (``PromptMeter``),
and ``choices`` x the output cap (``n`` answers of at most ``max_tokens``,
or the model's maximum, each).

**Billing takes the upstream's figures**, bounded by what the model can do,
never by our own estimate: a prompt of at most what the model can read (its
``context_window``, per input), and at most ``choices`` x the output cap.
A prompt the upstream counted above the reservation is billed all the same,
in the same settle: the excess is an *overdraft* (``gateway/money/settle.py``
logs and meters it), and the team's next request is judged on the true
spend. So a team can pass a hard limit by at most the honest excess of the
requests it has in flight. Figures past those bounds (or negative, or not
numbers) are refused, logged and counted as anomalies: billed at the bound,
or from our own count. So are the prompt cache's figures (``Usage.cache_anomaly``:
read as 0, or at most the prompt), the prompt and output beside them billed as
they came. Every door and every batch line goes through these two functions,
and a door that corrected figures shows the client what it billed.

The hold prices each prompt token at the dearest of the input, cached-read
and cache-write prices, so that any split of a prompt the upstream reports
(all of it read from the cache, or written to it) bills at most what was held.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from core.config import GatewayConfig, ModelFacts
from core.usage import NEGATIVE, OVER_CAP, UNREADABLE, Usage
from gateway.money.pricing import billed_nano, held_nano
from gateway.money.prompt_meter import PromptMeter

logger = logging.getLogger("routegate.money")

# Why an upstream's figures were not billed as they came: NEGATIVE, OVER_CAP, UNREADABLE
# (core/types.py, where the usage readers find a bad cache figure).
# Events a stream may carry beyond one per output token it may bill: role and
# finish chunks per answer, the usage chunk, keep-alive comments.
EVENTS_PER_CHOICE, EVENT_SLACK = 8, 64


@dataclass(slots=True)      # not frozen: built on every request, and frozen costs
class Demand:
    """What a request asks of a model, as far as money goes."""

    prompt_tokens: dict[str, int]    # our count, per tokenizer encoding
    messages: int                    # messages (or inputs): what a chat template wraps
    max_tokens: int | None           # the client's cap on one answer's output
    choices: int = 1                 # answers asked for (``n``; ``best_of`` for completions)
    generates: bool = True           # False for embeddings: input tokens only
    inputs: int = 1                  # prompts read apart (legacy completions, embeddings)
    team: str = ""                   # whose prompts the meter learns from

    def output_cap(self, model: ModelFacts) -> int:
        """The most output tokens ``model`` may bill for this request."""
        if not self.generates:
            return 0
        one = min(self.max_tokens or model.max_output_tokens, model.max_output_tokens)
        return self.choices * one

    def prompt_cap(self, model: ModelFacts) -> int:
        """The most prompt tokens ``model`` may bill: all it can read, per input."""
        return model.context_window * self.inputs

    def stream_event_cap(self, model: ModelFacts) -> int:
        """The most events a stream from ``model`` may carry before it is cut: every
        billable token as its own event, 10% more, and the framing around them."""
        return (math.ceil(1.1 * self.output_cap(model)) + EVENTS_PER_CHOICE * self.choices
                + EVENT_SLACK)

    def ours(self, model: ModelFacts) -> int:
        return self.prompt_tokens[model.tokenizer]


@dataclass(slots=True)
class Ceiling:
    """What is reserved for one attempt on ``model`` (tokens and nano-USD), and the
    most it may bill: ``prompt_cap`` and ``output_tokens``."""

    model: ModelFacts
    prompt_tokens: int               # reserved: our count, widened by the meter
    output_tokens: int               # reserved, and the most billed
    cost: int                        # nano-USD reserved, at the pool's rate
    prompt_cap: int = 0              # the most prompt tokens billed (context window x inputs)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(slots=True)
class Billed:
    usage: Usage
    cost: int                        # nano-USD
    anomaly: str | None = None       # NEGATIVE | OVER_CAP | UNREADABLE: the figures refused


class Tariff:
    """Prices, output caps and each model's learned prompt count, per team."""

    def __init__(self, config: GatewayConfig) -> None:
        self._margins = {m.name: m.prompt_margin for m in config.models}
        # (model, team) -> its meter: one team's prompts never widen or tighten
        # what another's are reserved at. Teams come from the config: bounded.
        self.meters: dict[tuple[str, str], PromptMeter] = {}

    def meter(self, model: str, team: str) -> PromptMeter:
        meter = self.meters.get((model, team))
        if meter is None:
            meter = self.meters[(model, team)] = PromptMeter(self._margins.get(model, 0.25))
        return meter

    def ceiling(self, model: ModelFacts, demand: Demand, rate: float) -> Ceiling:
        cap = demand.prompt_cap(model)
        prompt = min(cap, self.meter(model.name, demand.team).bound(
            demand.prompt_tokens[model.tokenizer], demand.messages))
        output = demand.output_cap(model)
        return Ceiling(model, prompt, output, held_nano(model, prompt, output, rate), cap)

    def bill(self, ceiling: Ceiling, reported: Usage | None, demand: Demand,
             estimate_output: int, rate: float, unreadable: bool = False,
             prompt_seen: Usage | None = None) -> Billed:
        """What one attempt is billed. ``reported`` is the upstream's usage (None when it
        sent none we could read: ``unreadable`` says it sent some); ``estimate_output``
        our own count of its output. Without ``reported``, ``prompt_seen`` (the upstream's
        count of the prompt, said before a stream broke or was left) bills the prompt,
        its cache reads and writes at their prices, beside our count of the output."""
        model = ceiling.model
        ours = demand.prompt_tokens[model.tokenizer]
        if reported is None and prompt_seen is not None and prompt_seen.prompt_tokens >= 0:
            reported = Usage(prompt_seen.prompt_tokens,
                             min(estimate_output, ceiling.output_tokens), True,
                             prompt_seen.cached_tokens, prompt_seen.cache_write_tokens,
                             prompt_seen.cache_anomaly, prompt_seen.cache_write_1h_tokens)
        usage, anomaly = within(ceiling, reported, ours, estimate_output)
        if anomaly is None and unreadable:
            anomaly = UNREADABLE
        if reported is not None and not usage.estimated:     # its prompt figure was read
            self.meter(model.name, demand.team).observe(ours, demand.messages,
                                                        usage.prompt_tokens)
        if anomaly is not None:
            logger.warning("model %s reported usage %s for a request that may bill at most "
                           "%d + %d tokens (%s); billing %s", model.name, reported,
                           ceiling.prompt_cap, ceiling.output_tokens, anomaly, usage)
        return Billed(usage, billed_nano(model, usage, rate), anomaly)


def within(ceiling: Ceiling, reported: Usage | None, ours: int, estimate_output: int
           ) -> tuple[Usage, str | None]:
    """The usage to bill for ``reported`` on ``ceiling``'s model, and why it was
    corrected (None: it was not). Pure: the relay uses it on a stream's usage chunk too."""
    if reported is not None and (reported.prompt_tokens < 0 or reported.completion_tokens < 0):
        reported, anomaly = None, NEGATIVE
    else:
        anomaly = None
    if reported is None:
        return Usage(ours, min(estimate_output, ceiling.output_tokens), estimated=True), anomaly
    cap = ceiling.prompt_cap or ceiling.prompt_tokens
    if reported.prompt_tokens > cap or reported.completion_tokens > ceiling.output_tokens:
        return _clamped(reported, cap, ceiling.output_tokens), OVER_CAP
    return reported, reported.cache_anomaly


def _clamped(reported: Usage, cap: int, output_cap: int) -> Usage:
    """``reported`` within ``cap`` prompt and ``output_cap`` output tokens. The prompt
    keeps its dearest parts first (uncached, then written to the cache), the cache's
    reads fill the rest: never the cheapest reading of figures that are already wrong."""
    prompt = min(reported.prompt_tokens, cap)
    uncached = min(reported.uncached_tokens, prompt)
    written = min(reported.cache_write_tokens, prompt - uncached)
    cached = min(reported.cached_tokens, prompt - uncached - written)
    return Usage(prompt, min(reported.completion_tokens, output_cap), reported.estimated,
                 cached, written, cache_write_1h_tokens=min(reported.cache_write_1h_tokens,
                                                            written))


def usage_json(usage: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_tokens": usage.prompt_tokens,
                           "completion_tokens": usage.completion_tokens,
                           "total_tokens": usage.prompt_tokens + usage.completion_tokens}
    if usage.cached_tokens or usage.cache_write_tokens:
        out["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
        if usage.cache_write_tokens:
            out["prompt_tokens_details"]["cache_write_tokens"] = usage.cache_write_tokens
    return out


def with_usage(data: dict[str, Any], usage: Usage) -> bytes:
    """A non-streamed answer whose ``usage`` says what was billed."""
    return orjson.dumps({**data, "usage": usage_json(usage)})


def checked_usage_event(event_data: dict[str, Any], raw: bytes, ceiling: Ceiling, ours: int,
                        relayed: Callable[[], int]) -> bytes:
    """A stream's usage chunk as the client may see it: untouched when its figures
    are billed as they are, else saying what will be billed (``relayed``: our count
    of the output so far, asked for only when the figures are unusable)."""
    reported = Usage.from_wire(event_data.get("usage"))
    if reported is not None and min(reported.prompt_tokens, reported.completion_tokens) >= 0:
        usage, anomaly = within(ceiling, reported, ours, 0)
        if anomaly is None:
            return raw
    else:
        usage = within(ceiling, None, ours, relayed())[0]
    return b"data: " + orjson.dumps({**event_data, "usage": usage_json(usage)}) + b"\n\n"

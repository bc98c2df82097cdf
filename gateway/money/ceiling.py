"""The one rule for what a request can cost, and what is billed within it.

    tariff = Tariff(config)                                      # on the app state
    ceiling = tariff.ceiling(model, demand, rate)                # reserve: per model of the ladder
    billed = tariff.bill(ceiling, reported, demand, estimate)    # settle: per attempt that answered
    billed.usage, billed.cost, billed.anomaly

A request's **ceiling** on one model is the most it can be billed there:
the prompt at our own count, widened by what the model's upstream was seen
to count (``PromptMeter``), and ``choices`` × the output cap (``n`` answers
of at most ``max_tokens``, or the model's maximum, each). The reservation is
built from the ceilings of the ladder, so **billing never exceeds what was
reserved**: an upstream's figures beyond the ceiling (or negative, or past
any sane integer) are refused, logged and counted as anomalies, and the
excess is not billed. Every protocol and every batch line goes through
these two functions.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import orjson

from core.config import GatewayConfig, ModelConfig
from core.types import Usage
from gateway.money.pricing import cost_nano
from gateway.money.prompt_meter import PromptMeter

logger = logging.getLogger("routegate.money")

NEGATIVE, OVER_RESERVED = "negative", "over_reserved"
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

    def output_cap(self, model: ModelConfig) -> int:
        """The most output tokens ``model`` may bill for this request."""
        if not self.generates:
            return 0
        one = min(self.max_tokens or model.max_output_tokens, model.max_output_tokens)
        return self.choices * one

    def stream_event_cap(self, model: ModelConfig) -> int:
        """The most events a stream from ``model`` may carry before it is cut: every
        billable token as its own event, 10% more, and the framing around them."""
        return (math.ceil(1.1 * self.output_cap(model)) + EVENTS_PER_CHOICE * self.choices
                + EVENT_SLACK)

    def ours(self, model: ModelConfig) -> int:
        return self.prompt_tokens[model.tokenizer]


@dataclass(slots=True)
class Ceiling:
    """The most one attempt on ``model`` can be billed: tokens and nano-USD."""

    model: ModelConfig
    prompt_tokens: int
    output_tokens: int
    cost: int                        # nano-USD at the pool's rate

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(slots=True)
class Billed:
    usage: Usage
    cost: int                        # nano-USD, never above the ceiling's
    anomaly: str | None = None       # NEGATIVE | OVER_RESERVED: the upstream's figures refused


class Tariff:
    """Prices, output caps and each model's learned prompt count."""

    def __init__(self, config: GatewayConfig) -> None:
        self.meters = {m.name: PromptMeter(m.prompt_margin) for m in config.models}

    def ceiling(self, model: ModelConfig, demand: Demand, rate: float) -> Ceiling:
        prompt = self.meters[model.name].bound(demand.prompt_tokens[model.tokenizer],
                                               demand.messages)
        output = demand.output_cap(model)
        return Ceiling(model, prompt, output, cost_nano(model, prompt, output, rate))

    def bill(self, ceiling: Ceiling, reported: Usage | None, demand: Demand,
             estimate_output: int, rate: float) -> Billed:
        """What one attempt is billed. ``reported`` is the upstream's usage (None when it
        sent none we could read); ``estimate_output`` our own count of its output."""
        model = ceiling.model
        ours = demand.prompt_tokens[model.tokenizer]
        usage, anomaly = within(ceiling, reported, ours, estimate_output)
        if reported is not None and anomaly != NEGATIVE:
            self.meters[model.name].observe(ours, demand.messages, reported.prompt_tokens)
        if anomaly is not None:
            logger.warning("model %s reported usage %s for a request whose ceiling is %d + %d "
                           "tokens (%s); billing %s", model.name, reported,
                           ceiling.prompt_tokens, ceiling.output_tokens, anomaly, usage)
        cost = cost_nano(model, usage.prompt_tokens, usage.completion_tokens, rate)
        return Billed(usage, min(cost, ceiling.cost), anomaly)


def within(ceiling: Ceiling, reported: Usage | None, ours: int, estimate_output: int
           ) -> tuple[Usage, str | None]:
    """The usage to bill for ``reported`` under ``ceiling``, and why it was corrected
    (None: it was not). Pure: the relay uses it on a stream's usage chunk too."""
    if reported is not None and (reported.prompt_tokens < 0 or reported.completion_tokens < 0):
        reported, anomaly = None, NEGATIVE
    else:
        anomaly = None
    if reported is None:
        return Usage(ours, min(estimate_output, ceiling.output_tokens), estimated=True), anomaly
    if (reported.prompt_tokens > ceiling.prompt_tokens
            or reported.completion_tokens > ceiling.output_tokens):
        return Usage(min(reported.prompt_tokens, ceiling.prompt_tokens),
                     min(reported.completion_tokens, ceiling.output_tokens),
                     reported.estimated), OVER_RESERVED
    return reported, None


def usage_json(usage: Usage) -> dict[str, int]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}


def with_usage(data: dict[str, Any], usage: Usage) -> bytes:
    """A non-streamed answer whose ``usage`` says what was billed."""
    return orjson.dumps({**data, "usage": usage_json(usage)})


def checked_usage_event(event_data: dict[str, Any], raw: bytes, ceiling: Ceiling, ours: int,
                        relayed: int) -> bytes:
    """A stream's usage chunk as the client may see it: untouched when its figures
    are within ``ceiling``, else saying what will be billed (``relayed``: the token
    chunks so far, our count of the output when the figures are unreadable)."""
    reported = Usage.from_wire(event_data.get("usage"))
    usage, anomaly = within(ceiling, reported, ours, relayed)
    if reported is not None and anomaly is None:
        return raw
    return b"data: " + orjson.dumps({**event_data, "usage": usage_json(usage)}) + b"\n\n"

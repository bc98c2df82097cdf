"""Settling one request: from what was served to the nano-dollar billed.

    bill = Bill()
    ... the pipeline fills it in as the request goes ...
    settle(gw, outcome, attempts, bill)        # in the pipeline's one finally: queued

The cost is computed here and only here (``gateway.money.pricing`` gives the
prices): the delivered answer, plus every refused answer of an escalation,
each from its own usage and filed in the ledger under its own model. Then it
is written to the outcome for the request log and settled against the one
reservation. Nothing here raises: the answer is already decided.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from budget.pricing import usd
from budget.reservation import Reservation
from core.config import ModelConfig
from core.types import Usage
from gateway.money.metering import billed_usage, count_answer_tokens
from gateway.money.pricing import cost_nano
from gateway.money.reserve import settle_budget
from gateway.pipeline.attempts import Attempts
from gateway.pipeline.features import RequestFeatures
from gateway.pipeline.outcome import Outcome

if TYPE_CHECKING:
    from gateway.state import AppState

logger = logging.getLogger("routegate.billing")


@dataclass(slots=True)
class Bill:
    reservation: Reservation | None = None
    rate: float = 1.0                     # the pool's price multiplier
    features: RequestFeatures | None = None
    max_tokens: int | None = None         # the client's cap on output
    served: bool = False                  # an answer (or part of a stream) was produced
    reported: Usage | None = None         # the delivered answer's usage, unchecked
    answer: Any = None                    # a non-streamed answer's JSON, to count if needed
    relayed_chunks: int = 0               # token-bearing chunks a stream relayed

    def max_output(self, model: ModelConfig) -> int:
        return min(self.max_tokens or model.max_output_tokens, model.max_output_tokens)

    def usage_of(self, model: ModelConfig, reported: Usage | None, answer: Any, chunks: int
                 ) -> tuple[Usage, str | None]:
        assert self.features is not None
        estimate = 0
        if reported is None:
            estimate = chunks if answer is None else count_answer_tokens(answer, model.tokenizer)
        return billed_usage(reported, prompt_tokens=self.features.prompt_tokens(model.tokenizer),
                            max_output=self.max_output(model), estimate_output=estimate)

    def delivered(self, model: ModelConfig, cancelled: bool) -> tuple[Usage | None, str | None]:
        if self.features is None:
            return None, None
        if not self.served:
            # A client that left mid-call cancelled a generation that had
            # started: its prompt was read. Failed attempts bill nothing.
            prompt = self.features.prompt_tokens(model.tokenizer)
            return (Usage(prompt, 0, estimated=True), None) if cancelled else (None, None)
        return self.usage_of(model, self.reported, self.answer, self.relayed_chunks)


@dataclass(slots=True)
class Line:
    """One ledger line: a model's share of the request."""

    model: ModelConfig
    usage: Usage
    cost: int


def _lines(o: Outcome, attempts: Attempts, bill: Bill) -> list[Line]:
    """The refused answers first, the delivered one last."""
    lines = []
    for a in attempts.discarded if bill.features is not None else ():
        usage, _ = bill.usage_of(a.model, a.usage, a.answer, a.chunks)
        lines.append(Line(a.model, usage, cost_nano(a.model, usage.prompt_tokens,
                                                    usage.completion_tokens, bill.rate)))
    model = attempts.model
    # A client that left while its request still queued for a slot cost nothing.
    cancelled = o.status == 499 and attempts.started
    delivered, anomaly = (None, None) if model is None else bill.delivered(model, cancelled)
    if model is not None and delivered is not None:
        o.usage_estimated, o.usage_anomaly = delivered.estimated, anomaly
        lines.append(Line(model, delivered, cost_nano(model, delivered.prompt_tokens,
                                                      delivered.completion_tokens, bill.rate)))
    return lines


def _report(o: Outcome, lines: list[Line]) -> None:
    o.prompt_tokens = sum(x.usage.prompt_tokens for x in lines)
    o.completion_tokens = sum(x.usage.completion_tokens for x in lines)
    o.cost_usd = usd(sum(x.cost for x in lines))
    energy = [x.model.energy_j_per_token * (x.usage.prompt_tokens + x.usage.completion_tokens)
              for x in lines if x.model.energy_j_per_token is not None]
    o.energy_j = sum(energy) if energy else None


def settle(gw: AppState, o: Outcome, attempts: Attempts, bill: Bill) -> list[asyncio.Future[None]]:
    """Bill every line and release the hold; the settles are queued when this
    returns, and each future is done once its spend is stored (Redis or the
    journal). Nobody has to wait for them: a live response is already sent."""
    lines = _lines(o, attempts, bill)
    _report(o, lines)
    if bill.reservation is None:
        return []
    reservation, bill.reservation = bill.reservation, None
    settled: list[asyncio.Future[None]] = []
    try:
        for i, line in enumerate(lines[:-1]):
            settled.append(settle_budget(gw, reservation, line.model, line.usage, line.cost,
                                         attempt=i + 1))
        if lines:
            last = lines[-1]
            settled.append(settle_budget(gw, reservation, last.model, last.usage, last.cost))
        else:
            settled.append(settle_budget(gw, reservation, attempts.model, None, 0))
    except Exception:  # settling must never break a response already sent
        logger.exception("request %s: settling the budget failed", o.request_id)
    return settled

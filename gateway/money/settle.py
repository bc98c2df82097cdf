"""Settling one request: from what was served to the nano-dollar billed.

    bill = Bill(gw.tariff)
    ... the pipeline fills it in as the request goes ...
    settle(gw, outcome, attempts, bill)        # in the pipeline's one finally: queued

The cost is computed here and only here, by ``Tariff.bill`` within each
model's ceiling (``gateway.money.ceiling``): the delivered answer, plus
every refused answer of an escalation, each from its own usage and filed in
the ledger under its own model. Then it is written to the outcome for the
request log and settled against the one reservation. Nothing here raises:
the answer is already decided.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from budget.pricing import usd
from budget.reservation import Reservation
from core.config import ModelConfig
from core.types import Usage
from gateway.money.ceiling import Billed, Ceiling, Demand, Tariff
from gateway.money.metering import count_answer_tokens
from gateway.money.reserve import settle_budget
from gateway.pipeline.attempts import Attempts
from gateway.pipeline.outcome import Outcome

if TYPE_CHECKING:
    from gateway.state import AppState

logger = logging.getLogger("routegate.billing")


@dataclass(slots=True)
class Bill:
    tariff: Tariff
    reservation: Reservation | None = None
    rate: float = 1.0                     # the pool's price multiplier
    demand: Demand | None = None          # None until the request was parsed and measured
    ceilings: dict[str, Ceiling] = field(default_factory=dict)   # per model of the ladder
    served: bool = False                  # an answer (or part of a stream) was produced
    reported: Usage | None = None         # the delivered answer's usage, unchecked
    answer: Any = None                    # a non-streamed answer's JSON, to count if needed
    relayed_chunks: int = 0               # token-bearing chunks a stream relayed
    streamed: Any = None                  # a stream kept for its shadow: its answer (not billed)
    _delivered: Billed | None = None      # the served answer, billed once

    def ceiling(self, model: ModelConfig) -> Ceiling:
        ceiling = self.ceilings.get(model.name)
        if ceiling is None:   # not in the ladder the reservation covered: cannot happen, but
            assert self.demand is not None          # never bill without a ceiling
            ceiling = self.ceilings[model.name] = self.tariff.ceiling(model, self.demand,
                                                                      self.rate)
        return ceiling

    def billed(self, model: ModelConfig, reported: Usage | None, answer: Any, chunks: int
               ) -> Billed:
        assert self.demand is not None
        estimate = 0
        if reported is None or min(reported.prompt_tokens, reported.completion_tokens) < 0:
            # Not usable: our own count of the output stands in (Tariff.bill decides).
            estimate = chunks if answer is None else count_answer_tokens(answer, model.tokenizer)
        return self.tariff.bill(self.ceiling(model), reported, self.demand, estimate, self.rate)

    def served_answer(self, model: ModelConfig) -> Billed:
        """The delivered answer's bill (computed once: the meter learns from it once)."""
        if self._delivered is None:
            self._delivered = self.billed(model, self.reported, self.answer, self.relayed_chunks)
        return self._delivered

    def delivered(self, model: ModelConfig, cancelled: bool) -> Billed | None:
        if self.demand is None:
            return None
        if not self.served:
            # A client that left mid-call cancelled a generation that had
            # started: its prompt was read. Failed attempts bill nothing.
            return self.billed(model, None, None, 0) if cancelled else None
        return self.served_answer(model)


@dataclass(slots=True)
class Line:
    """One ledger line: a model's share of the request."""

    model: ModelConfig
    usage: Usage
    cost: int


def _lines(o: Outcome, attempts: Attempts, bill: Bill) -> list[Line]:
    """The refused answers first, the delivered one last."""
    lines = []
    anomalies = []
    for a in attempts.discarded if bill.demand is not None else ():
        billed = bill.billed(a.model, a.usage, a.answer, a.chunks)
        anomalies.append(billed.anomaly)
        lines.append(Line(a.model, billed.usage, billed.cost))
    model = attempts.model
    # A client that left while its request still queued for a slot cost nothing.
    cancelled = o.status == 499 and attempts.started
    delivered = None if model is None else bill.delivered(model, cancelled)
    if model is not None and delivered is not None:
        o.usage_estimated = delivered.usage.estimated
        anomalies.append(delivered.anomaly)
        lines.append(Line(model, delivered.usage, delivered.cost))
    o.usage_anomaly = next((a for a in reversed(anomalies) if a), None)
    return lines


def _report(o: Outcome, lines: list[Line]) -> None:
    prompt = completion = cost = 0
    energy: float | None = None
    for x in lines:       # usually one line: a loop, not four generators
        prompt += x.usage.prompt_tokens
        completion += x.usage.completion_tokens
        cost += x.cost
        per_token = x.model.energy_j_per_token
        if per_token is not None:
            energy = (energy or 0.0) + per_token * (x.usage.prompt_tokens + x.usage.completion_tokens)
    o.prompt_tokens, o.completion_tokens, o.cost_usd, o.energy_j = (prompt, completion, usd(cost),
                                                                    energy)


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

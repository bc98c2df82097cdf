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
from budget.reservation import Progress, Reservation
from core.config import ModelConfig
from core.types import Usage
from gateway.money.ceiling import Billed, Ceiling, Demand, Tariff
from gateway.money.metering import count_answer_tokens, count_relayed_tokens
from gateway.money.pricing import cost_nano
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
    relayed_text: list[str] | None = None  # what they carried, to count if no usage came
    usage_sent: bool = False              # the upstream sent a usage object (readable or not)
    attempts: Attempts | None = None      # the request's attempts, while it runs
    relay: Any = None                     # the stream being relayed (a StreamRelay), if any
    streamed: Any = None                  # a stream kept for its shadow: its answer (not billed)
    _delivered: Billed | None = None      # the served answer, billed once

    def ceiling(self, model: ModelConfig) -> Ceiling:
        ceiling = self.ceilings.get(model.name)
        if ceiling is None:   # not in the ladder the reservation covered: cannot happen, but
            assert self.demand is not None          # never bill without a ceiling
            ceiling = self.ceilings[model.name] = self.tariff.ceiling(model, self.demand,
                                                                      self.rate)
        return ceiling

    def billed(self, model: ModelConfig, reported: Usage | None, answer: Any, chunks: int,
               text: list[str] | None = None, sent: bool = False) -> Billed:
        """``chunks``/``text``: what a stream relayed; ``sent``: usage came, unreadable."""
        assert self.demand is not None
        estimate = 0
        if reported is None or min(reported.prompt_tokens, reported.completion_tokens) < 0:
            # Not usable: our own count of the output stands in (Tariff.bill decides).
            if answer is not None:
                estimate = count_answer_tokens(answer, model.tokenizer)
            else:
                estimate = count_relayed_tokens(text, model.tokenizer) if text else chunks
        unreadable = reported is None and (sent or (isinstance(answer, dict)
                                                     and answer.get("usage") is not None))
        return self.tariff.bill(self.ceiling(model), reported, self.demand, estimate, self.rate,
                                unreadable)

    def progress(self) -> Progress | None:
        """What the request has run up so far, for its lease renewals (a replica that
        dies mid-request is billed this): once an attempt started, its prompt at our
        count, and the tokens a stream relayed, counted with the model's tokenizer."""
        attempts = self.attempts
        if (attempts is None or not attempts.started or attempts.model is None
                or self.demand is None):
            return None
        model = attempts.model
        prompt = self.demand.ours(model)
        output = self.relay.tokens_so_far() if self.relay is not None else 0
        return model.name, prompt, output, cost_nano(model, prompt, output, self.rate)

    def served_answer(self, model: ModelConfig) -> Billed:
        """The delivered answer's bill (computed once: the meter learns from it once)."""
        if self._delivered is None:
            self._delivered = self.billed(model, self.reported, self.answer, self.relayed_chunks,
                                          self.relayed_text, self.usage_sent)
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


def _overdraft(o: Outcome, reservation: Reservation, lines: list[Line]) -> None:
    """An upstream that counted more than was reserved is billed all the same: the
    excess is an overdraft, logged and metered, and the team's next request is
    judged on the true spend (``gateway/money/ceiling.py``)."""
    billed = sum(line.cost for line in lines)
    if reservation.amount and billed > reservation.amount:
        o.overdraft_usd = usd(billed - reservation.amount)
        logger.info("request %s of team %s: billed %d nano-USD, %d above its reservation "
                    "(an overdraft: the upstream counted more than we did)", o.request_id,
                    o.team, billed, billed - reservation.amount)


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
    _overdraft(o, reservation, lines)
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

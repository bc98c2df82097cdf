"""Settling one request: from what was served to the nano-dollar billed.

    bill = Bill(tariff)
    ... the pipeline fills it in as the request goes ...
    lines = bill_lines(bill, discarded, model, cancelled=False)   # in its one finally
    settled = settle_lines(store, bill, lines)                    # queued settles, overdraft

The cost is computed here and only here, by ``Tariff.bill`` on each model's
ceiling (``gateway.money.ceiling``): the delivered answer, plus every
refused answer of an escalation, each from its own usage and filed in the
ledger under its own model. Then it is settled against the one
reservation. Nothing here raises: the answer is already decided. A leaf
below the pipeline: it takes the budget store and plain values, never the
app's state (``[tool.importlinter]``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from budget.reservation import Progress, Reservation
from budget.store import BudgetStore
from core.config import ModelFacts
from core.usage import Usage
from gateway.money.ceiling import Billed, Ceiling, Demand, Tariff
from gateway.money.metering import count_answer_tokens, count_relayed_tokens
from gateway.money.pricing import cost_nano
from gateway.money.reserve import settle_budget

logger = logging.getLogger("routegate.billing")


class Charged(Protocol):
    """An attempt whose answer was generated and refused (an escalation): it is billed."""

    @property
    def model(self) -> ModelFacts: ...

    @property
    def usage(self) -> Usage | None: ...

    @property
    def answer(self) -> Any: ...

    @property
    def chunks(self) -> int: ...


class Relayed(Protocol):
    def tokens_so_far(self) -> int:
        """Our count of what a stream has relayed up to now."""
        ...


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
    prompt_seen: Usage | None = None      # a stream's prompt as the upstream counted it early
    # While the request runs: which model's attempt went upstream (None: none yet), and
    # the stream being relayed, if any. The lease renewals read both (``progress``).
    upstream: Callable[[], ModelFacts | None] | None = None
    relay: Relayed | None = None
    streamed: Any = None                  # a stream kept (shadow, response cache): its answer
    shadowed: bool = False                # the stream was sampled for a shadow answer
    _delivered: Billed | None = None      # the served answer, billed once

    def ceiling(self, model: ModelFacts) -> Ceiling:
        ceiling = self.ceilings.get(model.name)
        if ceiling is None:   # not in the ladder the reservation covered: cannot happen, but
            assert self.demand is not None          # never bill without a ceiling
            ceiling = self.ceilings[model.name] = self.tariff.ceiling(model, self.demand,
                                                                      self.rate)
        return ceiling

    def billed(self, model: ModelFacts, reported: Usage | None, answer: Any, chunks: int,
               text: list[str] | None = None, sent: bool = False,
               prompt_seen: Usage | None = None) -> Billed:
        """``chunks``/``text``: what a stream relayed; ``sent``: usage came, unreadable;
        ``prompt_seen``: the upstream's count of the prompt, said before the stream's end
        (a stream that ended without its usage bills its prompt by it)."""
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
                                unreadable, prompt_seen)

    def progress(self) -> Progress | None:
        """What the request has run up so far, for its lease renewals (a replica that
        dies mid-request is billed this): once an attempt went upstream, its prompt at
        our count, and the tokens a stream relayed, counted with the model's tokenizer."""
        model = self.upstream() if self.upstream is not None else None
        if model is None or self.demand is None:
            return None
        prompt = self.demand.ours(model)
        output = self.relay.tokens_so_far() if self.relay is not None else 0
        return model.name, prompt, output, cost_nano(model, prompt, output, self.rate)

    def served_answer(self, model: ModelFacts) -> Billed:
        """The delivered answer's bill (computed once: the meter learns from it once)."""
        if self._delivered is None:
            self._delivered = self.billed(model, self.reported, self.answer, self.relayed_chunks,
                                          self.relayed_text, self.usage_sent, self.prompt_seen)
        return self._delivered

    def delivered(self, model: ModelFacts, cancelled: bool) -> Billed | None:
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

    model: ModelFacts
    usage: Usage
    cost: int
    rate: float = 1.0        # the pool's price multiplier it was billed at


@dataclass(slots=True)
class Lines:
    """What a request is billed: its ledger lines (the refused answers first, the
    delivered one last), and what the log says of them."""

    lines: list[Line] = field(default_factory=list)
    anomaly: str | None = None        # the last usage correction, if any
    estimated: bool = False           # the delivered answer's usage is our own count
    # The lines' sums, kept as they are added (read several times a request).
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    def add(self, line: Line) -> None:
        self.lines.append(line)
        usage = line.usage
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.cost += line.cost
        self.cached_tokens += usage.cached_tokens
        self.cache_write_tokens += usage.cache_write_tokens

    def by_model(self) -> dict[str, Lines]:
        """The lines of each model, apart (the delivered answer's model last)."""
        out: dict[str, Lines] = {}
        for x in self.lines:
            out.setdefault(x.model.name, Lines()).add(x)
        return out

    def cache_effect(self) -> tuple[int, int]:
        """Nano-USD the prompt cache saved, and what it cost above the input price: its
        reads at the input price less their bill, and its writes' bill less the input
        price (Anthropic's writes cost 1.25x). A write priced below the input is a saving."""
        saved = premium = 0
        for x in self.lines:
            read, written = x.usage.cached_tokens, x.usage.cache_write_tokens
            hour = x.usage.cache_write_1h_tokens
            if read:
                saved += (cost_nano(x.model, read, 0, x.rate)
                          - cost_nano(x.model, read, 0, x.rate, cached=read))
            if written:
                extra = (cost_nano(x.model, written, 0, x.rate, written=written, hour=hour)
                         - cost_nano(x.model, written, 0, x.rate))
                saved, premium = saved + max(0, -extra), premium + max(0, extra)
        return saved, premium


def bill_lines(bill: Bill, discarded: Sequence[Charged], model: ModelFacts | None,
               cancelled: bool) -> Lines:
    """The request's lines: ``discarded`` answers, then the one ``model`` delivered.
    ``cancelled``: the client left after the call went upstream (its prompt was read)."""
    out = Lines()
    anomalies: list[str | None] = []
    for a in discarded if bill.demand is not None else ():
        billed = bill.billed(a.model, a.usage, a.answer, a.chunks)
        anomalies.append(billed.anomaly)
        out.add(Line(a.model, billed.usage, billed.cost, bill.rate))
    delivered = None if model is None else bill.delivered(model, cancelled)
    if model is not None and delivered is not None:
        out.estimated = delivered.usage.estimated
        anomalies.append(delivered.anomaly)
        out.add(Line(model, delivered.usage, delivered.cost, bill.rate))
    out.anomaly = next((a for a in reversed(anomalies) if a), None)
    return out


@dataclass(slots=True)
class Settled:
    futures: list[asyncio.Future[None]] = field(default_factory=list)   # done once stored
    overdraft: int = 0        # nano-USD billed above the reservation (the upstream counted more)


def settle_lines(store: BudgetStore | None, bill: Bill, lines: Lines, request_id: str = ""
                 ) -> Settled:
    """Bill every line and release the hold; the settles are queued when this
    returns, and each future is done once its spend is stored (Redis or the
    journal). Nobody has to wait for them: a live response is already sent.

    An upstream that counted more than was reserved is billed all the same: the
    excess is an overdraft, logged here (and metered from the outcome), and the
    team's next request is judged on the true spend (``ceiling.py``)."""
    out = Settled()
    if bill.reservation is None or store is None:
        return out
    reservation, bill.reservation = bill.reservation, None
    if reservation.amount and lines.cost > reservation.amount:
        out.overdraft = lines.cost - reservation.amount
        logger.info("request %s of team %s: billed %d nano-USD, %d above its reservation "
                    "(an overdraft: the upstream counted more than we did)", request_id,
                    reservation.team, lines.cost, out.overdraft)
    try:
        for i, line in enumerate(lines.lines[:-1]):
            out.futures.append(settle_budget(store, reservation, line.model, line.usage,
                                             line.cost, attempt=i + 1))
        if lines.lines:
            last = lines.lines[-1]
            out.futures.append(settle_budget(store, reservation, last.model, last.usage,
                                             last.cost))
        else:
            out.futures.append(settle_budget(store, reservation, None, None, 0))
    except Exception:  # settling must never break a response already sent
        logger.exception("request %s: settling the budget failed", request_id)
    return out

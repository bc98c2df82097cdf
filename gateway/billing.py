"""Settling one request: from what was served to the nano-dollar billed.

    bill = Bill()
    ... the pipeline fills it in as the request goes ...
    await settle(gw, outcome, model, bill)        # in the pipeline's one finally

The cost is computed here and only here (``gateway.pricing`` gives the
prices), then written to the outcome for the request log and settled
against the reservation. Nothing here raises: the answer is already decided.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from budget.pricing import usd
from budget.reservation import Reservation
from core.config import ModelConfig
from core.types import Usage
from gateway.features import RequestFeatures
from gateway.metering import billed_usage, count_answer_tokens
from gateway.outcome import Outcome
from gateway.pricing import cost_nano
from gateway.spend import settle_budget

if TYPE_CHECKING:
    from gateway.state import AppState

logger = logging.getLogger("routegate.billing")


@dataclass(slots=True)
class Bill:
    reservation: Reservation | None = None
    rate: float = 1.0                     # the pool's price multiplier
    features: RequestFeatures | None = None
    served: bool = False                  # an answer (or part of a stream) was produced
    max_output: int = 0
    reported: Usage | None = None         # the upstream's usage, unchecked
    answer: Any = None                    # a non-streamed answer's JSON, to count if needed
    relayed_chunks: int = 0               # token-bearing chunks a stream relayed

    def answered(self, max_output: int) -> None:
        self.served, self.max_output = True, max_output

    def usage(self, model: ModelConfig, cancelled: bool) -> tuple[Usage | None, str | None]:
        if self.features is None:
            return None, None
        prompt = self.features.prompt_tokens(model.tokenizer)
        if not self.served:
            # A client that left mid-call cancelled a generation that had
            # started: its prompt was read. Failed attempts bill nothing.
            return (Usage(prompt, 0, estimated=True), None) if cancelled else (None, None)
        if self.reported is None:
            estimate = (self.relayed_chunks if self.answer is None
                        else count_answer_tokens(self.answer, model.tokenizer))
        else:
            estimate = 0
        return billed_usage(self.reported, prompt_tokens=prompt, max_output=self.max_output,
                            estimate_output=estimate)


async def settle(gw: AppState, o: Outcome, model: ModelConfig | None, bill: Bill) -> None:
    cost = 0
    usage, anomaly = (None, None) if model is None else bill.usage(model, o.status == 499)
    if usage is not None and model is not None:
        o.prompt_tokens, o.completion_tokens = usage.prompt_tokens, usage.completion_tokens
        o.usage_estimated, o.usage_anomaly = usage.estimated, anomaly
        cost = cost_nano(model, usage.prompt_tokens, usage.completion_tokens, bill.rate)
        o.cost_usd = usd(cost)
        if model.energy_j_per_token is not None:
            o.energy_j = model.energy_j_per_token * (usage.prompt_tokens + usage.completion_tokens)
    if bill.reservation is None:
        return
    reservation, bill.reservation = bill.reservation, None
    try:
        await settle_budget(gw, reservation, model, o.prompt_tokens, o.completion_tokens, cost)
    except Exception:  # settling must never break a response already sent
        logger.exception("request %s: settling the budget failed", o.request_id)

"""The request path's two budget calls: reserve the worst case, settle the truth.

    reservation = await reserve_budget(gw, caller, request_id, chat, decision, features, rate)
    ...
    settle_budget(gw, reservation, model, usage, cost)     # queued: a future to await or not

One reservation covers the whole fallback chain (the most expensive model in
it at its maximum output), so a fallback never needs a second round trip and
no attempt can overspend. Settling bills the model that answered (its ledger
row), from the checked usage (``gateway.money.metering``), exactly once.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

from budget.journal import RELEASE_ONLY
from budget.reservation import Reservation
from core.config import ModelConfig
from core.types import Usage
from gateway.auth import Caller
from gateway.money.pricing import cost_nano
from gateway.pipeline.features import RequestFeatures
from gateway.pipeline.request import ChatRequest
from policies import Decision

if TYPE_CHECKING:
    from gateway.state import AppState


def max_output(chat: ChatRequest, model: ModelConfig) -> int:
    """The most output tokens ``model`` may bill for this request."""
    return min(chat.max_tokens or model.max_output_tokens, model.max_output_tokens)


def worst_case(gw: AppState, chat: ChatRequest, decision: Decision, features: RequestFeatures,
               rate: float, *, every_attempt_bills: bool = False) -> tuple[int, int]:
    """(nano-USD, tokens) the request can cost at most, over its ladder.

    A failed attempt bills nothing, so without answer checks at most one
    attempt bills: the dearest. With them, every refused answer is billed
    too, so the worst case is the whole ladder's sum."""
    costs, tokens = [], []
    for name in (decision.model, *decision.fallbacks):
        model = gw.models[name]
        prompt = features.prompt_tokens(model.tokenizer)
        out = max_output(chat, model)
        costs.append(cost_nano(model, prompt, out, rate))
        tokens.append(prompt + out)
    if every_attempt_bills:
        return sum(costs), sum(tokens)
    return max(costs), max(tokens)


async def reserve_budget(gw: AppState, caller: Caller, request_id: str, chat: ChatRequest,
                         decision: Decision, features: RequestFeatures, rate: float, *,
                         every_attempt_bills: bool = False) -> Reservation | None:
    if not gw.config.budget.enabled:
        return None
    amount, tokens = worst_case(gw, chat, decision, features, rate,
                                every_attempt_bills=every_attempt_bills)
    return await gw.budget.reserve(
        request_id=request_id, team=caller.team.name, team_limits=caller.team.budget,
        key_id=caller.key_id, key_limits=caller.key.budget, model=decision.model,
        max_cost_nanousd=amount, max_tokens=tokens)


def settle_budget(gw: AppState, reservation: Reservation, model: ModelConfig | None,
                  usage: Usage | None, cost: int, *, attempt: int = 0) -> asyncio.Future[None]:
    """Bill ``cost`` to ``model``'s ledger line and, for the delivered answer
    (``attempt`` 0), release the rest of the hold. A refused answer of an
    escalation (``attempt`` 1, 2, ...) is billed under its own idempotency id
    and holds nothing: the reservation already covered the whole ladder."""
    if attempt:
        reservation = replace(reservation, request_id=f"{reservation.request_id}.{attempt}",
                              amount=0, tokens=0)
    if usage is None:
        # Nothing was generated: free the hold without marking the id settled,
        # so work that runs again under the same id (a batch line) is billed then.
        return gw.budget.settle(reservation, input_tokens=0, output_tokens=0, cost_nanousd=0,
                                model=RELEASE_ONLY)
    return gw.budget.settle(reservation, input_tokens=usage.prompt_tokens,
                            output_tokens=usage.completion_tokens, cost_nanousd=cost,
                            model=model.name if model else None)

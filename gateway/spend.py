"""The request path's two budget calls: reserve the worst case, settle the truth.

    reservation = await reserve_budget(gw, caller, request_id, chat, decision, features, rate)
    ...
    await settle_budget(gw, reservation, model, usage, cost)

One reservation covers the whole fallback chain (the most expensive model in
it at its maximum output), so a fallback never needs a second round trip and
no attempt can overspend. Settling bills the model that answered (its ledger
row), from the checked usage (``gateway.metering``), exactly once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from budget.reservation import Reservation
from core.config import ModelConfig
from gateway.auth import Caller
from gateway.features import RequestFeatures
from gateway.pricing import cost_nano
from gateway.request import ChatRequest
from policies import Decision

if TYPE_CHECKING:
    from gateway.state import AppState


def max_output(chat: ChatRequest, model: ModelConfig) -> int:
    """The most output tokens ``model`` may bill for this request."""
    return min(chat.max_tokens or model.max_output_tokens, model.max_output_tokens)


def worst_case(gw: AppState, chat: ChatRequest, decision: Decision, features: RequestFeatures,
               rate: float) -> tuple[int, int]:
    """(nano-USD, tokens) the request can cost at most, over its fallback chain."""
    cost, tokens = 0, 0
    for name in (decision.model, *decision.fallbacks):
        model = gw.models[name]
        prompt = features.prompt_tokens(model.tokenizer)
        out = max_output(chat, model)
        cost = max(cost, cost_nano(model, prompt, out, rate))
        tokens = max(tokens, prompt + out)
    return cost, tokens


async def reserve_budget(gw: AppState, caller: Caller, request_id: str, chat: ChatRequest,
                         decision: Decision, features: RequestFeatures, rate: float
                         ) -> Reservation | None:
    if not gw.config.budget.enabled:
        return None
    amount, tokens = worst_case(gw, chat, decision, features, rate)
    return await gw.budget.reserve(
        request_id=request_id, team=caller.team.name, team_limits=caller.team.budget,
        key_id=caller.key_id, key_limits=caller.key.budget, model=decision.model,
        max_cost_nanousd=amount, max_tokens=tokens)


async def settle_budget(gw: AppState, reservation: Reservation, model: ModelConfig | None,
                        input_tokens: int, output_tokens: int, cost: int) -> None:
    """Bill ``cost`` (zero when nothing was generated) to the model that answered,
    and release the rest of the hold."""
    await gw.budget.settle(reservation, input_tokens=input_tokens, output_tokens=output_tokens,
                           cost_nanousd=cost, model=model.name if model else None)

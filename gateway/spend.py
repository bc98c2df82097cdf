"""The request path's two budget calls: reserve the worst case, settle the truth.

    reservation = await reserve_budget(gw, ex, chat, decision, features)
    ...
    await settle_budget(gw, ex, model, usage)

One reservation covers the whole fallback chain (the most expensive model in
it at its maximum output), so a fallback never needs a second round trip and
no attempt can overspend. Settling bills the model that answered, from the
upstream's usage (or, when a stream broke, the tokens relayed), exactly once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from backends.base import Usage
from budget import cost_nanousd
from core.config import ModelConfig
from gateway.features import RequestFeatures
from gateway.request import ChatRequest
from policies import Decision

if TYPE_CHECKING:
    from gateway.exchange import Exchange
    from gateway.state import AppState


def model_cost_nanousd(model: ModelConfig, usage: Usage) -> int:
    p = model.price
    return cost_nanousd(usage.prompt_tokens, usage.completion_tokens, p.input_per_mtok,
                        p.output_per_mtok)


def worst_case(gw: AppState, chat: ChatRequest, decision: Decision,
               features: RequestFeatures) -> tuple[int, int]:
    """(nano-USD, tokens) the request can cost at most, over its fallback chain."""
    cost, tokens = 0, 0
    for name in (decision.model, *decision.fallbacks):
        model = gw.models[name]
        prompt = features.prompt_tokens(model.tokenizer)
        out = min(chat.max_tokens or model.max_output_tokens, model.max_output_tokens)
        p = model.price
        cost = max(cost, cost_nanousd(prompt, out, p.input_per_mtok, p.output_per_mtok))
        tokens = max(tokens, prompt + out)
    return cost, tokens


async def reserve_budget(gw: AppState, ex: Exchange, chat: ChatRequest, decision: Decision,
                         features: RequestFeatures) -> None:
    caller = ex.caller
    assert caller is not None
    if not gw.config.budget.enabled:
        return
    amount, tokens = worst_case(gw, chat, decision, features)
    ex.reservation = await gw.budget.reserve(
        request_id=ex.request_id, team=caller.team.name, team_limits=caller.team.budget,
        key_id=caller.key_id, key_limits=caller.key.budget, model=decision.model,
        max_cost_nanousd=amount, max_tokens=tokens)
    if ex.reservation.soft_limited:
        ex.record.budget = "soft-limit"


async def settle_budget(gw: AppState, ex: Exchange, model: ModelConfig | None,
                        usage: Usage | None) -> None:
    """Bill the real cost (zero when nothing was generated) and release the rest."""
    if ex.reservation is None:
        return
    reservation, ex.reservation = ex.reservation, None
    if model is None or usage is None:
        await gw.budget.settle(reservation, input_tokens=0, output_tokens=0, cost_nanousd=0)
        return
    await gw.budget.settle(reservation, input_tokens=usage.prompt_tokens,
                           output_tokens=usage.completion_tokens,
                           cost_nanousd=model_cost_nanousd(model, usage))

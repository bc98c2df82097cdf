"""The request path's two budget calls: reserve the worst case, settle the truth.

    ceilings = ladder_ceilings(tariff, models, ("small", "large"), demand, rate)
    reservation = await reserve_budget(store, payer, request_id, "small", ceilings)
    ...
    settle_budget(store, reservation, model, usage, cost)     # queued: a future to await or not

One reservation covers the whole ladder, from each model's ceiling
(``gateway.money.ceiling``: what that model's attempt reserves), so a
fallback never needs a second round trip. Settling bills the model that
answered (its ledger row), exactly once. These take the budget store and
the values they use, never the app's state: money is a leaf below the
pipeline (``[tool.importlinter]``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from budget.journal import RELEASE_ONLY
from budget.reservation import Reservation
from budget.store import BudgetStore
from core.budget_config import Limits
from core.config import ModelFacts
from core.usage import Usage
from gateway.money.ceiling import Ceiling, Demand, Tariff


@dataclass(frozen=True, slots=True)
class Payer:
    """Whose budget a request is held against: its team and key, with their limits."""

    team: str
    team_limits: Limits | None
    key_id: str | None
    key_limits: Limits | None


def ladder_ceilings(tariff: Tariff, models: Mapping[str, ModelFacts], ladder: Sequence[str],
                    demand: Demand, rate: float) -> dict[str, Ceiling]:
    """Each model the request may try, with what is reserved for it there."""
    return {name: tariff.ceiling(models[name], demand, rate) for name in ladder}


def worst_case(ceilings: dict[str, Ceiling], *, every_attempt_bills: bool = False
               ) -> tuple[int, int]:
    """(nano-USD, tokens) the request can cost at most, over its ladder.

    A failed attempt bills nothing, so without answer checks at most one
    attempt bills: the dearest. With them, every refused answer is billed
    too, so the worst case is the whole ladder's sum."""
    if len(ceilings) == 1:          # one model, no ladder: the usual explicit request
        (only,) = ceilings.values()
        return only.cost, only.tokens
    costs = [c.cost for c in ceilings.values()]
    tokens = [c.tokens for c in ceilings.values()]
    if every_attempt_bills:
        return sum(costs), sum(tokens)
    return max(costs), max(tokens)


async def reserve_budget(store: BudgetStore | None, payer: Payer, request_id: str, model: str,
                         ceilings: dict[str, Ceiling], *, every_attempt_bills: bool = False,
                         stable: bool = False, run_order: int = 0,
                         counted: bool = True) -> Reservation | None:
    """``store`` None: budgets are off. ``stable``: ``request_id`` names work that may
    run again (a batch line), so its settle stays idempotent for as long as that work
    may run (``run_order``: which run this is, ``BudgetStore.reserve``). ``counted``:
    False for the gateway's own work, which the rate limits do not count."""
    if store is None:
        return None
    amount, tokens = worst_case(ceilings, every_attempt_bills=every_attempt_bills)
    return await store.reserve(
        request_id=request_id, team=payer.team, team_limits=payer.team_limits,
        key_id=payer.key_id, key_limits=payer.key_limits, model=model,
        max_cost_nanousd=amount, max_tokens=tokens, stable=stable, run_order=run_order,
        counted=counted)


def settle_budget(store: BudgetStore, reservation: Reservation, model: ModelFacts | None,
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
        return store.settle(reservation, input_tokens=0, output_tokens=0, cost_nanousd=0,
                            model=RELEASE_ONLY)
    return store.settle(reservation, input_tokens=usage.prompt_tokens,
                        output_tokens=usage.completion_tokens, cost_nanousd=cost,
                        model=model.name if model else None, cached_tokens=usage.cached_tokens,
                        cache_write_tokens=usage.cache_write_tokens)

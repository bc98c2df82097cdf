"""What a request costs: the one place prices, pools and token counts meet.

    rate = pool_rate(config, "batch")                  # pools.batch.price_multiplier
    cost_nano(model, usage, rate)                      # exact integer nano-USD, billed
    cost_usd(model, prompt, output, rate)              # float, for ranking and logs

Billing, the worst-case reservation, routing's predicted cost and the
request log all call these, so a pool's price multiplier can never apply in
one and be forgotten in another.
"""

from __future__ import annotations

from budget.nanousd import cost_nanousd, usd
from core.config import GatewayConfig, ModelConfig


def pool_rate(config: GatewayConfig, pool: str) -> float:
    """The price multiplier of ``pool`` (batch work is billed at a discount)."""
    return config.pools.batch.price_multiplier if pool == "batch" else 1.0


def cost_nano(model: ModelConfig, prompt_tokens: int, output_tokens: int, rate: float = 1.0) -> int:
    p = model.price
    if rate == 1.0:
        return cost_nanousd(prompt_tokens, output_tokens, p.input_per_mtok, p.output_per_mtok)
    return cost_nanousd(prompt_tokens, output_tokens, p.input_per_mtok * rate,
                        p.output_per_mtok * rate)


def cost_usd(model: ModelConfig, prompt_tokens: int, output_tokens: int, rate: float = 1.0) -> float:
    """Predicted cost for ranking candidates: a float is enough, and cheaper."""
    p = model.price
    return (prompt_tokens * p.input_per_mtok + output_tokens * p.output_per_mtok) * rate / 1e6


__all__ = ["pool_rate", "cost_nano", "cost_usd", "usd"]

"""What a request costs: the one place prices, pools and token counts meet.

    rate = pool_rate(config, "batch")                  # pools.batch.price_multiplier
    billed_nano(model, usage, rate)                    # exact integer nano-USD, billed
    held_nano(model, prompt, output, rate)             # the most they can bill: the hold
    cost_usd(model, prompt, output, rate)              # float, for ranking and logs

Billing, the worst-case reservation, routing's predicted cost and the
request log all call these, so a pool's price multiplier can never apply in
one and be forgotten in another.
"""

from __future__ import annotations

from budget.nanousd import cost_nanousd, usd
from core.config import GatewayConfig, ModelFacts
from core.usage import Usage


def pool_rate(config: GatewayConfig, pool: str) -> float:
    """The price multiplier of ``pool`` (batch work is billed at a discount)."""
    return config.pools.batch.price_multiplier if pool == "batch" else 1.0


def cost_nano(model: ModelFacts, prompt_tokens: int, output_tokens: int, rate: float = 1.0,
              cached: int = 0, written: int = 0, hour: int = 0) -> int:
    """What ``model`` bills: of ``prompt_tokens``, ``cached`` read from its prompt
    cache and ``written`` to it at their prices (``price.cached_input_per_mtok``,
    ``cache_write_per_mtok``; of ``written``, ``hour`` kept an hour at
    ``cache_write_1h_per_mtok``), the rest at the input price."""
    p = model.price
    plain = prompt_tokens - cached - written
    if not cached and not written:          # the usual case
        if rate == 1.0:
            return cost_nanousd(prompt_tokens, output_tokens, p.input_per_mtok,
                                p.output_per_mtok)
        return cost_nanousd(prompt_tokens, output_tokens, p.input_per_mtok * rate,
                            p.output_per_mtok * rate)
    hour = min(hour, written)
    return cost_nanousd(max(0, plain), output_tokens, p.input_per_mtok * rate,
                        p.output_per_mtok * rate, cached, p.cached_input * rate, written - hour,
                        p.cache_write * rate, hour, p.cache_write_1h * rate)


def held_nano(model: ModelFacts, prompt_tokens: int, output_tokens: int,
              rate: float = 1.0) -> int:
    """The most ``prompt_tokens`` and ``output_tokens`` can bill on ``model``, however
    the upstream splits the prompt between input, cache reads and cache writes: each
    prompt token at the dearest of their prices (``Rates.prompt_held``). A request's hold."""
    p = model.price
    if p.prompt_held == p.input_per_mtok:    # the usual case: cache prices at most the input
        return cost_nano(model, prompt_tokens, output_tokens, rate)
    return cost_nanousd(prompt_tokens, output_tokens, p.prompt_held * rate,
                        p.output_per_mtok * rate)


def billed_nano(model: ModelFacts, usage: Usage, rate: float = 1.0) -> int:
    """``cost_nano`` of an upstream's usage, its cached and written parts apart."""
    return cost_nano(model, usage.prompt_tokens, usage.completion_tokens, rate,
                     usage.cached_tokens, usage.cache_write_tokens, usage.cache_write_1h_tokens)


def cost_usd(model: ModelFacts, prompt_tokens: int, output_tokens: int, rate: float = 1.0,
             cached: int = 0, written: int = 0, hour: bool = False) -> float:
    """Predicted cost for ranking candidates: a float is enough, and cheaper.
    ``cached``: prompt tokens the model probably holds in its prompt cache; ``written``:
    those it will write there (a breakpoint cache's), at the cache-write price, or with
    ``hour`` (kept an hour) at ``cache_write_1h_per_mtok``."""
    p = model.price
    prompt = ((prompt_tokens - cached - written) * p.input_per_mtok + cached * p.cached_input
              + written * (p.cache_write_1h if hour else p.cache_write))
    return (prompt + output_tokens * p.output_per_mtok) * rate / 1e6


__all__ = ["pool_rate", "cost_nano", "held_nano", "billed_nano", "cost_usd", "usd"]

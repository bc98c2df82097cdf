"""Money as integers: every amount in Redis is nano-USD (1e-9 USD).

    cost_nanousd(1200, 300, input_per_mtok=0.15, output_per_mtok=0.60)  # 360_000
    cost_nanousd(200, 300, 0.15, 0.60, cached_tokens=1000, cached_per_mtok=0.015)
    usd(360_000)                                                          # 0.00036

Integers make sums exact: a thousand replicas adding a million request costs
end on exactly the figure the ledger's rows add up to, which floats cannot
promise. Prices are "USD per million tokens", so

    nano-USD = tokens * price_per_mtok * 1e9 / 1e6 = tokens * price_per_mtok * 1000

computed in ``Decimal`` (prices arrive as floats from YAML; ``str()`` keeps
the decimal the human wrote) and rounded half-up ONCE per request, on the
sum of the input and output parts, so no per-part rounding error piles up.
A nano-dollar is far below any provider's price granularity, so this one
rounding is the only inexactness, and it is the same on every replica.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache

NANO_PER_USD = 1_000_000_000
_NANO_PER_TOKEN_AT_ONE_USD_PER_MTOK = Decimal(1000)


@lru_cache(maxsize=1024)
def _price(value: float) -> Decimal:
    # A handful of distinct prices and limits; their Decimal form is made once.
    return Decimal(str(value))


# A price with at most nine decimals is an exact integer of 1e-15 USD per token
# (price_per_mtok * 1e9 / 1e6 nano-USD, times 1e6): its cost is integer arithmetic,
# the same figure Decimal gives, at a fraction of the cost (it runs on every request).
_FINE_PER_NANO = 1_000_000


@lru_cache(maxsize=4096)
def _fine(value: float) -> int | None:
    scaled = _price(value) * NANO_PER_USD
    return int(scaled) if scaled == scaled.to_integral_value() else None


def cost_nanousd(
    input_tokens: int,
    output_tokens: int,
    input_per_mtok: float,
    output_per_mtok: float,
    cached_tokens: int = 0,
    cached_per_mtok: float = 0.0,
    written_tokens: int = 0,
    write_per_mtok: float = 0.0,
    written_1h_tokens: int = 0,
    write_1h_per_mtok: float = 0.0,
) -> int:
    """Cost of one request in nano-USD, rounded half-up once. ``input_tokens`` are
    billed at the input price, ``cached_tokens`` (read from a prompt cache),
    ``written_tokens`` (written to it) and ``written_1h_tokens`` (written to it for an
    hour) at theirs: four parts of the prompt, apart."""
    if min(input_tokens, output_tokens, cached_tokens, written_tokens, written_1h_tokens) < 0:
        raise ValueError("token counts must be >= 0")
    fine_in, fine_out = _fine(input_per_mtok), _fine(output_per_mtok)
    if not cached_tokens and not written_tokens and not written_1h_tokens:   # the usual case
        if fine_in is not None and fine_out is not None:
            fine = input_tokens * fine_in + output_tokens * fine_out
            return (fine + _FINE_PER_NANO // 2) // _FINE_PER_NANO
        exact = (input_tokens * _price(input_per_mtok) + output_tokens * _price(output_per_mtok)
                 ) * _NANO_PER_TOKEN_AT_ONE_USD_PER_MTOK
        return int(exact.to_integral_value(rounding=ROUND_HALF_UP))
    parts = ((input_tokens, input_per_mtok), (output_tokens, output_per_mtok),
             (cached_tokens, cached_per_mtok), (written_tokens, write_per_mtok),
             (written_1h_tokens, write_1h_per_mtok))
    fines = [_fine(price) for _, price in parts]
    if all(f is not None for f in fines):
        fine = sum(n * f for (n, _), f in zip(parts, fines, strict=True) if f is not None)
        return (fine + _FINE_PER_NANO // 2) // _FINE_PER_NANO
    exact = sum((n * _price(price) for n, price in parts), Decimal(0))
    return int((exact * _NANO_PER_TOKEN_AT_ONE_USD_PER_MTOK).to_integral_value(
        rounding=ROUND_HALF_UP))


def usd_to_nano(amount_usd: float) -> int:
    """A configured dollar amount as nano-USD (half-up, from its decimal text)."""
    nano = _price(amount_usd) * NANO_PER_USD
    return int(nano.to_integral_value(rounding=ROUND_HALF_UP))


def usd(nano: int) -> float:
    """Nano-USD as dollars, for messages and JSON; never for sums."""
    return nano / NANO_PER_USD

"""Turning a refused reservation into the 429 the client sees.

Budget limits become ``QuotaExceeded`` (OpenAI's ``insufficient_quota``:
retrying will not help until the window turns); rpm/tpm become
``RateLimited`` (``rate_limit_exceeded``) with a ``retry-after`` header for
the start of the next minute.
"""

from __future__ import annotations

from gateway.budget.pricing import usd
from gateway.errors import QuotaExceeded, RateLimited


def _who(team: str, key_id: str | None, scope: str) -> str:
    if scope == "key" and key_id:
        return f"API key '{key_id}' of team '{team}'"
    return f"Team '{team}'"


def budget_exceeded(
    *,
    team: str,
    key_id: str | None,
    scope: str,
    window: str,
    committed: int,
    limit: int,
    amount: int,
) -> QuotaExceeded:
    """``committed`` is nano-USD spent plus reserved by requests in flight."""
    return QuotaExceeded(
        f"{_who(team, key_id, scope)} has reached its {window} hard "
        f"budget: ${usd(committed):.6f} spent or reserved of ${usd(limit):.6f}, and this "
        f"request may cost up to ${usd(amount):.6f}. Lower max_tokens, choose a "
        f"cheaper model, or ask an admin to raise the limit."
    )


def rate_exceeded(
    *,
    team: str,
    key_id: str | None,
    scope: str,
    limit_name: str,
    current: int,
    limit: int,
    retry_after_s: int,
) -> RateLimited:
    what = "requests" if limit_name == "rpm" else "tokens"
    return RateLimited(
        f"{_who(team, key_id, scope)} has reached its rate limit of {limit} {what} per "
        f"minute ({current} used this minute). Retry after {retry_after_s} s.",
        headers={"retry-after": str(retry_after_s)},
    )


def fail_open_exceeded(*, team: str, cap: int, amount: int) -> QuotaExceeded:
    return QuotaExceeded(
        f"The budget store is unreachable, and team '{team}' has used this replica's "
        f"emergency allowance (${usd(cap):.6f}; this request may cost up to "
        f"${usd(amount):.6f}). Retry once the budget store is back."
    )

"""Turning a refused reservation into the 429 the client sees.

Budget limits become ``QuotaExceeded`` (OpenAI's ``insufficient_quota``:
retrying will not help until the window turns); rpm/tpm become
``RateLimited`` (``rate_limit_exceeded``) with a ``retry-after`` header for
when the sliding window will have room, if nothing else arrives.
"""

from __future__ import annotations

import math

from budget.keys import Windows
from budget.nanousd import usd
from budget.scripts import ReserveReply
from core.errors import QuotaExceeded, RateLimited


def refusal(reply: ReserveReply, *, team: str, key_id: str | None, windows: Windows, now: float,
            amount: int, tokens: int) -> RateLimited:
    """The 429 for a reserve the script refused (``reply.ok`` is false)."""
    if reply.limit in ("daily", "monthly"):
        return budget_exceeded(team=team, key_id=key_id, scope=reply.scope, window=reply.limit,
                               committed=reply.current, limit=reply.limit_value, amount=amount)
    weight = windows.previous_minute_weight(now)
    return rate_exceeded(
        team=team,
        key_id=key_id,
        scope=reply.scope,
        limit_name=reply.limit,
        current=reply.current + math.floor(reply.previous * weight),
        limit=reply.limit_value,
        retry_after_s=rate_retry_after(
            now_count=reply.current, previous_count=reply.previous, limit=reply.limit_value,
            need=1 if reply.limit == "rpm" else tokens, elapsed_s=now - windows.minute * 60),
    )


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
        f"cheaper model, or ask an admin to raise the limit.",
        # Both SDKs honour it: a retry cannot pass a hard limit, so none is made.
        headers={"x-should-retry": "false"},
    )


def rate_retry_after(*, now_count: int, previous_count: int, limit: int, need: int,
                     elapsed_s: float) -> int:
    """Seconds until ``need`` more fits the sliding window, if nothing else arrives.

    The window counts this minute plus the previous minute weighted by the
    share of the last 60 s it still covers. Either the previous minute's share
    fades enough before this minute ends, or this minute becomes the previous
    one and has to fade in turn.
    """
    def seconds(t: float) -> int:   # rounded first: 60 x (1 - 1/3) is 40.000000000000007
        return max(1, math.ceil(round(t, 6)))

    room = limit - need - now_count
    if room >= 0 and previous_count > 0:
        at = 60.0 * (1 - room / previous_count)          # seconds into this minute
        if at <= 60.0:
            return seconds(at - elapsed_s)
    if need > limit:
        return seconds(120.0 - elapsed_s)                # never fits; two windows from now
    at_next = 60.0 * (1 - (limit - need) / now_count) if now_count else 0.0
    return seconds(60.0 - elapsed_s + max(at_next, 0.0))


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
        f"minute ({current} in the last 60 s). Retry after {retry_after_s} s.",
        headers={"retry-after": str(retry_after_s)},
    )


def fail_open_exceeded(*, team: str, cap: int, amount: int) -> QuotaExceeded:
    return QuotaExceeded(
        f"The budget store is unreachable, and team '{team}' has used this replica's "
        f"emergency allowance (${usd(cap):.6f}; this request may cost up to "
        f"${usd(amount):.6f}). Retry once the budget store is back."
    )

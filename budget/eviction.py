"""Whether the budget's Redis may evict keys: spend counters that vanish are budgets that lie.

    risk = await eviction_risk(client)      # None, or "maxmemory 2mb with allkeys-lru: ..."

Redis at its ``maxmemory`` either refuses writes (``noeviction``: the budget
scripts fail, and the gateway follows ``budget.fail_policy``) or evicts keys
(every other policy: the day's spend, the month's, the ledger and the
settled markers all carry TTLs, so even ``volatile-*`` may take them, and a
team is then served past its hard limit). ``routegate serve`` and
``check-config`` read the policy with ``INFO memory`` (which managed Redis
services allow where ``CONFIG GET`` is disabled) and say so; under
``fail_closed`` the gateway refuses to start on such a Redis unless
``budget.allow_evicting_redis`` is true.
"""

from __future__ import annotations

import asyncio
from typing import Any

SAFE_POLICY = "noeviction"
CALL_TIMEOUT_S = 2.0


def describe(memory: dict[str, Any]) -> str | None:
    """The risk in ``INFO memory``'s figures, or None when no key can be evicted."""
    limit = int(memory.get("maxmemory") or 0)
    policy = str(memory.get("maxmemory_policy") or SAFE_POLICY)
    if limit <= 0 or policy == SAFE_POLICY:
        return None
    return (f"the budget's Redis has maxmemory {limit} bytes with maxmemory-policy {policy}: "
            "when it fills, it evicts keys, spend counters among them, and teams are then "
            "served past their hard limits. Use noeviction (and storage.redis_url for bulk "
            "data), or set budget.allow_evicting_redis: true to accept it")


async def eviction_risk(client: Any) -> str | None:
    """``describe`` of the server behind ``client``; None if it cannot be read (a
    Redis that is down at start-up is the fail policy's business, not this check's)."""
    try:
        async with asyncio.timeout(CALL_TIMEOUT_S):
            memory = await client.info("memory")
    except Exception:
        return None
    if isinstance(memory, dict) and "maxmemory_policy" not in memory:   # a cluster: per node
        nodes = [m for m in memory.values() if isinstance(m, dict)]
        risks = [describe(m) for m in nodes]
        return next((r for r in risks if r), None)
    return describe(memory) if isinstance(memory, dict) else None

"""The budget store's calls outside the request path: usage reports and overrides.

A mixin of ``BudgetStore`` (``gw.budget.usage(...)``, ``gw.budget.set_override(...)``),
kept apart so the store holds only the request path and its failure handling.
Each call is bounded by ``CALL_TIMEOUT_S`` and turns an unreachable Redis
into a 503.
"""

from __future__ import annotations

import asyncio
from typing import Any

from budget import overrides, usage
from budget.failures import REDIS_UNAVAILABLE
from budget.keys import KeySpace
from budget.scripts import CALL_TIMEOUT_S
from core.budget_config import Limits
from core.errors import ServiceUnavailable


class AdminCalls:
    _redis: Any
    _keys: KeySpace

    def _mark_down(self, what: str, exc: BaseException) -> None:
        raise NotImplementedError

    async def usage(self, team: str, team_limits: Limits | None, *, days: int = 31) -> dict:
        """Spend today / this month, remaining budget, per key and the model x day ledger."""
        try:
            return await usage.team_usage(self._redis, self._keys, team, team_limits, days=days)
        except REDIS_UNAVAILABLE as exc:
            self._mark_down("usage", exc)
            raise ServiceUnavailable("The budget store (Redis) is unreachable.") from exc

    async def set_override(self, team: str, limits: Limits, *, key_id: str | None = None) -> None:
        """Replace the run-time override of the team (or one key); applies on every replica."""
        await self._admin(overrides.set_override(self._redis, self._keys, team, limits, key_id))

    async def clear_override(self, team: str, *, key_id: str | None = None) -> None:
        await self._admin(overrides.clear_override(self._redis, self._keys, team, key_id))

    async def get_override(self, team: str, *, key_id: str | None = None) -> Limits | None:
        return await self._admin(overrides.get_override(self._redis, self._keys, team, key_id))

    async def _admin(self, call: Any) -> Any:
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                return await call
        except REDIS_UNAVAILABLE as exc:
            self._mark_down("admin", exc)
            raise ServiceUnavailable("The budget store (Redis) is unreachable.") from exc

"""The two Lua scripts of the request path, their arguments and their replies.

``BudgetScripts`` loads ``reserve.lua`` and ``settle.lua`` (each with
``common.lua`` in front) once, and calls them by EVALSHA through redis-py's
``register_script``, which falls back to SCRIPT LOAD on NOSCRIPT (a restarted
or failed-over Redis). Everything else here is pure packing and parsing, so
it is tested without Redis.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from gateway.budget.config import Limits
from gateway.budget.keys import (
    DAY_TTL_S,
    LEDGER_TTL_S,
    MINUTE_TTL_S,
    MONTH_TTL_S,
    SETTLED_TTL_S,
    KeySpace,
    Windows,
)
from gateway.budget.pricing import usd_to_nano

# Field suffixes of a scope's limits, in ARGV order and in T:ovr.
LIMIT_FIELDS = ("dh", "ds", "mh", "ms", "rpm", "tpm")
_LIMIT_ATTRS = (
    "daily_hard_usd",
    "daily_soft_usd",
    "monthly_hard_usd",
    "monthly_soft_usd",
    "rpm",
    "tpm",
)


def limit_values(limits: Limits | None) -> dict[str, int]:
    """The limits that are set, as Redis integers (nano-USD for money)."""
    if limits is None:
        return {}
    out: dict[str, int] = {}
    for field, attr in zip(LIMIT_FIELDS, _LIMIT_ATTRS, strict=True):
        value = getattr(limits, attr)
        if value is not None:
            out[field] = usd_to_nano(value) if attr.endswith("_usd") else int(value)
    return out


def limits_from_values(values: dict[str, int]) -> Limits:
    """Inverse of ``limit_values`` (for reading overrides back)."""
    kwargs: dict[str, Any] = {}
    for field, attr in zip(LIMIT_FIELDS, _LIMIT_ATTRS, strict=True):
        if field in values:
            raw = values[field]
            kwargs[attr] = raw / 1e9 if attr.endswith("_usd") else raw
    return Limits(**kwargs)


@lru_cache(maxsize=1024)
def _limit_args(limits: Limits | None) -> tuple[str, ...]:
    # Limits are frozen config values: convert each distinct one once, not per request.
    values = limit_values(limits)
    return tuple(str(values[f]) if f in values else "" for f in LIMIT_FIELDS)


@dataclass(frozen=True)
class ScopeFigures:
    """Nano-USD spent in the request's day and month, and outstanding reservations."""

    spent_day: int = 0
    spent_month: int = 0
    reserved: int = 0


@dataclass(frozen=True)
class SoftHard:
    """A scope's effective budget limits in nano-USD (config + overrides); None = unset."""

    daily_soft: int | None = None
    monthly_soft: int | None = None
    daily_hard: int | None = None
    monthly_hard: int | None = None

    def soft_reached(self, fig: ScopeFigures) -> bool:
        day = fig.spent_day + fig.reserved
        month = fig.spent_month + fig.reserved
        return (self.daily_soft is not None and day >= self.daily_soft) or (
            self.monthly_soft is not None and month >= self.monthly_soft
        )

    @classmethod
    def from_limits(cls, limits: Limits | None) -> SoftHard:
        v = limit_values(limits)
        return cls(v.get("ds"), v.get("ms"), v.get("dh"), v.get("mh"))


def _opt(value: Any) -> int | None:
    n = int(value)
    return None if n < 0 else n


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class ReserveReply:
    ok: bool
    limit: str  # "daily" | "monthly" | "rpm" | "tpm" when not ok
    scope: str  # "team" | "key"
    current: int
    limit_value: int
    team: ScopeFigures
    key: ScopeFigures
    team_limits: SoftHard
    key_limits: SoftHard

    @classmethod
    def parse(cls, raw: list[Any]) -> ReserveReply:
        n = [int(x) for x in raw[3:]]
        return cls(
            ok=int(raw[0]) == 1,
            limit=_text(raw[1]),
            scope=_text(raw[2]),
            current=n[0],
            limit_value=n[1],
            team=ScopeFigures(*n[2:5]),
            key=ScopeFigures(*n[5:8]),
            team_limits=SoftHard(*(_opt(x) for x in n[8:12])),
            key_limits=SoftHard(*(_opt(x) for x in n[12:16])),
        )


@dataclass(frozen=True)
class SettleReply:
    state: str  # "settled" | "unreserved" | "duplicate"
    team: ScopeFigures
    key: ScopeFigures

    @classmethod
    def parse(cls, raw: list[Any]) -> SettleReply:
        n = [int(x) for x in raw[1:]]
        return cls(_text(raw[0]), ScopeFigures(*n[0:3]), ScopeFigures(*n[3:6]))


def _lua(name: str) -> str:
    package = resources.files("gateway.budget")
    return (package / "common.lua").read_text() + "\n" + (package / name).read_text()


class BudgetScripts:
    """Registered reserve/settle scripts bound to one client and key space."""

    def __init__(self, redis: Any, keys: KeySpace, reservation_ttl_s: int) -> None:
        self._keys = keys
        self._ttl_ms = reservation_ttl_s * 1000
        self._reserve = redis.register_script(_lua("reserve.lua"))
        self._settle = redis.register_script(_lua("settle.lua"))

    async def reserve(
        self,
        *,
        request_id: str,
        team: str,
        windows: Windows,
        amount: int,
        tokens: int,
        key_id: str | None,
        team_limits: Limits | None,
        key_limits: Limits | None,
    ) -> ReserveReply:
        args = [request_id, amount, tokens, key_id or "", self._ttl_ms, MINUTE_TTL_S]
        args += [*_limit_args(team_limits), *_limit_args(key_limits)]
        raw = await self._reserve(keys=self._keys.reserve_keys(team, windows), args=args)
        return ReserveReply.parse(raw)

    async def settle(
        self,
        *,
        request_id: str,
        team: str,
        windows: Windows,
        key_id: str | None,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost: int,
    ) -> SettleReply:
        args = [request_id, key_id or "", model, input_tokens, output_tokens, cost]
        args += [DAY_TTL_S, MONTH_TTL_S, LEDGER_TTL_S, SETTLED_TTL_S]
        raw = await self._settle(keys=self._keys.settle_keys(team, windows), args=args)
        return SettleReply.parse(raw)

"""The two Lua scripts of the request path, their arguments and their replies.

``BudgetScripts`` loads ``reserve.lua`` and ``settle.lua`` (each with
``common.lua`` in front) once, and calls them by EVALSHA through redis-py's
``register_script``, which falls back to SCRIPT LOAD on NOSCRIPT (a restarted
or failed-over Redis). Everything else here is pure packing and parsing, so
it is tested without Redis.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, NamedTuple

from budget.keys import (
    DAY_TTL_S,
    LEDGER_TTL_S,
    MINUTE_TTL_S,
    MONTH_TTL_S,
    SETTLED_TTL_S,
    KeySpace,
    Windows,
)
from budget.pricing import usd_to_nano
from core.budget_config import Limits

# A bound on one script call, on a client that sets none of its own (redis-py
# with socket timeouts left unset); the pipelined client bounds every call.
CALL_TIMEOUT_S = 2.0

# Settles of one team and window within this long go to Redis in one call.
SETTLE_WINDOW_S = 0.002
SETTLE_BATCH_MAX = 64

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


class ScopeFigures(NamedTuple):   # tuples: built on every reserve, so cheap to build
    """Nano-USD spent in the request's day and month, and outstanding reservations."""

    spent_day: int = 0
    spent_month: int = 0
    reserved: int = 0


class SoftHard(NamedTuple):
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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(slots=True)
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
    previous: int = 0  # for a rate limit hit: the previous minute's count

    @classmethod
    def parse(cls, raw: list[Any]) -> ReserveReply:
        n = [int(x) for x in raw[3:]]
        lim = [None if x < 0 else x for x in n[8:16]]
        return cls(int(raw[0]) == 1, _text(raw[1]), _text(raw[2]), n[0], n[1],
                   ScopeFigures(n[2], n[3], n[4]), ScopeFigures(n[5], n[6], n[7]),
                   SoftHard(lim[0], lim[1], lim[2], lim[3]),
                   SoftHard(lim[4], lim[5], lim[6], lim[7]), n[16])


@dataclass(frozen=True)
class SettleReply:
    state: str  # "settled" | "unreserved" | "duplicate"
    team: ScopeFigures  # the team's figures after the whole batch

    @classmethod
    def parse_batch(cls, raw: list[Any]) -> list[SettleReply]:
        team = ScopeFigures(*(int(x) for x in raw[:3]))
        return [cls(_text(state), team) for state in raw[3:]]


def _lua(name: str) -> str:
    package = resources.files("budget")
    return (package / "common.lua").read_text() + "\n" + (package / name).read_text()


class BudgetScripts:
    """Registered reserve/settle scripts bound to one client and key space."""

    def __init__(self, redis: Any, keys: KeySpace, reservation_ttl_s: int) -> None:
        self._keys = keys
        self._ttl_ms = reservation_ttl_s * 1000
        self._reserve = redis.register_script(_lua("reserve.lua"))
        self._settle = redis.register_script(_lua("settle.lua"))
        self._bounded = getattr(redis, "call_timeout_s", None) is not None
        self._batches: dict[tuple[str, Windows], _SettleBatch] = {}
        self._running: set[asyncio.Task[None]] = set()

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
        previous_weight: float,
    ) -> ReserveReply:
        args = [request_id, amount, tokens, key_id or "", self._ttl_ms, MINUTE_TTL_S]
        args += [*_limit_args(team_limits), *_limit_args(key_limits), f"{previous_weight:.4f}"]
        call = self._reserve(keys=self._keys.reserve_keys(team, windows), args=args)
        if self._bounded:
            return ReserveReply.parse(await call)
        async with asyncio.timeout(CALL_TIMEOUT_S):
            return ReserveReply.parse(await call)

    def queue_settle(
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
    ) -> asyncio.Future[SettleReply]:
        """Settle one request. Settles of the same team and windows that arrive
        within ``SETTLE_WINDOW_S`` share one script call: settling is off the
        client's path, and one call for many saves a round trip and a script
        run per request on busy teams. The future has the reply, or the error
        of the batch's call."""
        loop = asyncio.get_running_loop()
        batch = self._batches.get((team, windows))
        if batch is None or len(batch.entries) >= SETTLE_BATCH_MAX:
            batch = self._batches[(team, windows)] = _SettleBatch(team, windows)
            loop.call_later(SETTLE_WINDOW_S, self._send, batch)
        future: asyncio.Future[SettleReply] = loop.create_future()
        batch.entries.append((request_id, key_id or "", model, input_tokens, output_tokens, cost))
        batch.futures.append(future)
        return future

    async def drain(self) -> None:
        """Send every waiting batch now and wait for all in flight (shutdown)."""
        for batch in list(self._batches.values()):
            self._send(batch)
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    def _send(self, batch: _SettleBatch) -> None:
        if batch.sent:
            return
        batch.sent = True
        if self._batches.get((batch.team, batch.windows)) is batch:
            del self._batches[(batch.team, batch.windows)]
        task = asyncio.ensure_future(self._settle_batch(batch))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _settle_batch(self, batch: _SettleBatch) -> None:
        args: list[Any] = [DAY_TTL_S, MONTH_TTL_S, LEDGER_TTL_S, SETTLED_TTL_S]
        for entry in batch.entries:
            args.extend(entry)
        try:
            call = self._settle(keys=self._keys.settle_keys(batch.team, batch.windows), args=args)
            if self._bounded:
                raw = await call
            else:
                async with asyncio.timeout(CALL_TIMEOUT_S):
                    raw = await call
            replies = SettleReply.parse_batch(raw)
        except BaseException as exc:  # every waiter learns, and journals its own entry
            failure = exc if isinstance(exc, Exception) else ConnectionError("settle cancelled")
            for future in batch.futures:
                if not future.done():
                    future.set_exception(failure)
            if failure is not exc:
                raise
            return
        for future, reply in zip(batch.futures, replies, strict=True):
            if not future.done():
                future.set_result(reply)


@dataclass(slots=True)
class _SettleBatch:
    team: str
    windows: Windows
    entries: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    futures: list[asyncio.Future[SettleReply]] = dataclasses.field(default_factory=list)
    sent: bool = False

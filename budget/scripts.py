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
from budget.nanousd import usd_to_nano
from core.budget_config import Limits

# A bound on one script call, on a client that sets none of its own (redis-py
# with socket timeouts left unset); the pipelined client bounds every call.
CALL_TIMEOUT_S = 2.0

# Settles of one team and window within this long go to Redis in one call
# (reserves: those of one loop tick), at most BATCH_MAX requests in a call.
SETTLE_WINDOW_S = 0.002
BATCH_MAX = 64

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
    previous: int  # for a rate limit hit: the previous minute's count
    soft: int      # 1: the team is at a soft limit, + 2: the key is (this hold counted)
    team: ScopeFigures       # the team's figures after the whole batch
    team_limits: SoftHard

    @classmethod
    def parse_batch(cls, raw: list[Any]) -> list[ReserveReply]:
        """reserve.lua's reply: the team's limits and figures, then seven values per request."""
        team_limits = SoftHard(*(None if x < 0 else x for x in raw[:4]))
        team = ScopeFigures(int(raw[4]), int(raw[5]), int(raw[6]))
        return [cls(True, "", "", 0, 0, 0, raw[at + 6], team, team_limits) if raw[at] == 1
                else cls(False, _text(raw[at + 1]), _text(raw[at + 2]), raw[at + 3], raw[at + 4],
                         raw[at + 5], raw[at + 6], team, team_limits)
                for at in range(7, len(raw), 7)]


@dataclass(slots=True)
class SettleReply:
    state: str  # "settled" | "unreserved" | "duplicate" | "released" | "rebilled"
    team: ScopeFigures  # the team's figures after the whole batch

    @classmethod
    def parse_batch(cls, raw: list[Any]) -> list[SettleReply]:
        team = ScopeFigures(*(int(x) for x in raw[:3]))
        return [cls(_text(state), team) for state in raw[3:]]


def _lua(name: str) -> str:
    package = resources.files("budget")
    ttls = (f"local DAY_TTL_S, MONTH_TTL_S, LEDGER_TTL_S, SETTLED_TTL_S = {DAY_TTL_S}, "
            f"{MONTH_TTL_S}, {LEDGER_TTL_S}, {SETTLED_TTL_S}\n")
    return ttls + (package / "common.lua").read_text() + "\n" + (package / name).read_text()


class BudgetScripts:
    """Registered reserve/settle scripts bound to one client and key space.

    Both calls are gathered per team and window: the reserves that arrive in
    one event loop tick, and the settles that finish within
    ``SETTLE_WINDOW_S``, go to Redis in one script call (at most
    ``BATCH_MAX``). One call for many saves a round trip, a script run and
    every counter's read and write per request on a busy team; a lone
    request waits one loop tick for its reserve, and nobody waits for a settle.
    """

    def __init__(self, redis: Any, keys: KeySpace, reservation_ttl_s: int,
                 stable_id_ttl_s: int = 14 * 86400) -> None:
        self._keys = keys
        self._ttl_ms = reservation_ttl_s * 1000
        self.stable_ttl_s = stable_id_ttl_s
        self._reserve = redis.register_script(_lua("reserve.lua"))
        self._settle = redis.register_script(_lua("settle.lua"))
        self._renew = redis.register_script(_lua("renew.lua"))
        self._bounded = getattr(redis, "call_timeout_s", None) is not None
        self._batches: dict[tuple[Any, ...], _Batch] = {}
        self._running: set[asyncio.Task[None]] = set()

    def reserve(
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
        counted: bool = True,
        dry_run: bool = False,
    ) -> asyncio.Future[ReserveReply]:
        """Reserve one request; the future has its reply, or the batch call's error.
        ``dry_run``: judge it against every limit, and hold and count nothing.
        The batch is judged with its first request's ``previous_weight`` (they
        arrived in the same tick). ``counted``: False for the gateway's own work,
        held against budgets but neither counted nor checked against rpm and tpm."""
        group = ("reserve" if not dry_run else "peek", team, windows, team_limits)
        batch = self._batches.get(group)
        if batch is None or len(batch.futures) >= BATCH_MAX:
            batch = self._open(group, self._reserve, self._keys.reserve_keys(team, windows),
                               [0 if dry_run else self._ttl_ms, MINUTE_TTL_S,
                                f"{previous_weight:.4f}", *_limit_args(team_limits)],
                               ReserveReply.parse_batch, 0.0)
        batch.args += (request_id, amount, tokens, key_id or "", *_limit_args(key_limits),
                       "1" if counted else "0")
        return batch.join()

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
        stable: bool = False,
        at_ms: int = 0,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> asyncio.Future[SettleReply]:
        """Settle one request; the future has its reply, or the batch call's error.
        A ``stable`` id stays settled for ``stable_id_ttl_s``, on any day; settled
        again with a later ``at_ms`` (the run's order: a batch line's generation), its
        bill replaces the first; with the same, a bill its expired hold left."""
        group = ("settle", team, windows)
        batch = self._batches.get(group)
        if batch is None or len(batch.futures) >= BATCH_MAX:
            batch = self._open(group, self._settle, self._keys.settle_keys(team, windows),
                               [DAY_TTL_S, MONTH_TTL_S, LEDGER_TTL_S, SETTLED_TTL_S,
                                self.stable_ttl_s], SettleReply.parse_batch, SETTLE_WINDOW_S)
        batch.args += (request_id, key_id or "", model, input_tokens, output_tokens, cost,
                       1 if stable else 0, at_ms, cached_tokens, cache_write_tokens)
        return batch.join()

    async def renew(self, team: str, holds: list[tuple[str, str]]) -> int:
        """Renew the leases of ``holds`` (request id, progress JSON or ""), one team's;
        returns how many were still held."""
        call = self._renew(keys=self._keys.hold_keys(team),
                           args=[self._ttl_ms, *(x for hold in holds for x in hold)])
        if self._bounded:
            return int(await call)
        async with asyncio.timeout(CALL_TIMEOUT_S):
            return int(await call)

    async def drain(self) -> None:
        """Wait for every batch, waiting or in flight, to be sent and answered (shutdown)."""
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    def _open(self, group: tuple[Any, ...], script: Any, keys: list[str], args: list[Any],
              parse: Any, delay_s: float) -> _Batch:
        batch = self._batches[group] = _Batch(group, script, keys, args, parse)
        # The task's first step runs in the next loop tick: every request of this
        # tick has joined by then.
        task = asyncio.ensure_future(self._run(batch, delay_s))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return batch

    async def _run(self, batch: _Batch, delay_s: float) -> None:
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
            self._close(batch)
            call = batch.script(keys=batch.keys, args=batch.args)
            if self._bounded:
                raw = await call
            else:
                async with asyncio.timeout(CALL_TIMEOUT_S):
                    raw = await call
            replies = batch.parse(raw)
        except BaseException as exc:  # every waiter learns (a settle journals its own entry)
            self._close(batch)
            failure = exc if isinstance(exc, Exception) else ConnectionError("call cancelled")
            for future in batch.futures:
                if not future.done():
                    future.set_exception(failure)
            if failure is not exc:
                raise
            return
        for future, reply in zip(batch.futures, replies, strict=True):
            if not future.done():
                future.set_result(reply)

    def _close(self, batch: _Batch) -> None:
        """No request joins the batch any more."""
        if self._batches.get(batch.group) is batch:
            del self._batches[batch.group]


@dataclass(slots=True)
class _Batch:
    group: tuple[Any, ...]
    script: Any
    keys: list[str]
    args: list[Any]
    parse: Any   # raw reply -> one reply per request, in order
    futures: list[asyncio.Future[Any]] = dataclasses.field(default_factory=list)

    def join(self) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futures.append(future)
        return future

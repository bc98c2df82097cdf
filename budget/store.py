"""BudgetStore: reserve before the upstream call, settle after it.

    store = BudgetStore(handle.client, config.budget, replica_id="gw-1", data_dir=data_dir)
    res = await store.reserve(request_id=rid, team="search", team_limits=team.budget,
                              key_id="ci", key_limits=key.budget, model="small",
                              max_cost_nanousd=worst_case, max_tokens=prompt + max_out)
    ...                                             # call the backend
    store.settle(res, input_tokens=u.prompt_tokens,          # queued; await it to
                 output_tokens=u.completion_tokens, cost_nanousd=cost)   # know it is stored

One script call each (``reserve.lua``, ``settle.lua``; a team's reserves
that arrive in one loop tick share one call, and so do its settles that
finish within 2 ms): every replica checks and
changes the same counters atomically, so concurrent requests can never all
pass on the same headroom. ``settle`` never raises: if Redis is
unreachable, the spend goes to the local journal and ``run_reconciler``
replays it later. When Redis is down, ``reserve`` follows
``budget.fail_policy``: 503 (fail_closed) or a small per-replica allowance
(fail_open, see ``failopen.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from redis.exceptions import TimeoutError as RedisTimeoutError

from budget.admin import AdminCalls
from budget.failopen import LocalAllowance, hard_left
from budget.failures import DOWN_BACKOFF_S, REDIS_UNAVAILABLE, unreplayable
from budget.journal import RELEASE_ONLY, JournalEntry, SpendJournal
from budget.keys import Clock, KeySpace, Windows
from budget.leases import Leases
from budget.nanousd import usd_to_nano
from budget.rejections import fail_open_exceeded, rate_exceeded, refusal
from budget.reservation import Reservation
from budget.scripts import (
    CALL_TIMEOUT_S,
    BudgetScripts,
    ReserveReply,
    ScopeFigures,
    SettleReply,
    SoftHard,
)
from core.budget_config import BudgetSettings, Limits
from core.errors import GatewayError, ServiceUnavailable

log = logging.getLogger(__name__)

_PRECHECKS = itertools.count()     # dry runs judged in one call must not share an id

# The most one settle may bill: far above any real request (4.6 billion USD),
# and far enough inside Redis's 64-bit counters that no sum of them overflows.
MAX_SETTLE_NANOUSD = 2**62


class BudgetStore(AdminCalls):
    """One replica's view of the shared budget state; lives on ``app.state``.

    Keeps no spend of its own except the fail-open allowance and the cached
    soft-limit flags: every figure that matters is in Redis.
    """

    def __init__(
        self,
        redis: Any,
        settings: BudgetSettings,
        *,
        replica_id: str,
        data_dir: Path,
        clock: Clock = time.time,
        scripts_client: Any = None,
    ) -> None:
        self._redis = redis
        self._settings = settings
        self._keys = KeySpace(settings.key_prefix, settings.timezone, clock)
        # The scripts may run on a leaner client than the rest (see pipelined.py).
        self._scripts = BudgetScripts(scripts_client or redis, self._keys,
                                      settings.reservation_ttl_s, settings.stable_id_ttl_s)
        journal_dir = Path(settings.journal_path or data_dir / "budget-journal")
        self.journal = SpendJournal(journal_dir, replica_id)
        self._local = LocalAllowance(
            usd_to_nano(settings.fail_open_usd_per_replica), settings.fail_open_rpm_per_replica
        )
        # Last figures Redis returned per team: soft-limit state for routing
        # and the remaining budget that caps fail-open spend.
        self._soft: dict[tuple[str, str | None], bool] = {}
        self._last: dict[str, tuple[ScopeFigures, SoftHard]] = {}
        self._down_until = 0.0
        self._last_ok = 0.0
        self._stopping = asyncio.Event()
        self._journaling: set[asyncio.Task[None]] = set()   # settles on their way to disk
        # Holds in Redis not yet settled: their leases are renewed while this replica lives.
        self.leases = Leases(self._scripts, settings.reservation_ttl_s, self._stopping,
                             self._suspect_down, self._mark_down)

    async def reserve(
        self,
        *,
        request_id: str,
        team: str,
        team_limits: Limits | None,
        key_id: str | None,
        key_limits: Limits | None,
        model: str,
        max_cost_nanousd: int,
        max_tokens: int,
        stable: bool = False,
        run_order: int = 0,
        counted: bool = True,
    ) -> Reservation:
        """Hold the worst-case cost; raise QuotaExceeded / RateLimited / ServiceUnavailable.

        ``max_tokens`` is the request's worst-case token count (prompt plus max
        output), counted against tpm until settle corrects it. ``stable``: the id
        may be settled again on another day (a batch line run again) and must still
        bill once: the highest ``run_order``'s bill stands (a batch line's generation,
        from 1; 0 replaces no bill). ``counted``: False for the gateway's own work
        (shadow answers), held against budgets but not against rpm and tpm, which
        are the clients' (the local fail-open cap counts everything).
        """
        now = self._keys.clock()
        windows = self._keys.windows(now)
        tried = not self._suspect_down()
        if tried:
            reply = await self._reserve_in_redis(request_id, team, windows, now, max_cost_nanousd,
                                                 max_tokens, key_id, team_limits, key_limits,
                                                 counted)
            if reply is not None:
                soft = self._remember(team, key_id, reply)
                if not reply.ok:
                    raise refusal(reply, team=team, key_id=key_id, windows=windows, now=now,
                                  amount=max_cost_nanousd, tokens=max_tokens)
                held = Reservation(request_id, team, key_id, model, max_cost_nanousd,
                                   max_tokens, windows, soft, stable=stable,
                                   run_order=run_order if stable else 0)
                self.leases.hold(held)
                return held
        try:
            return replace(self._reserve_locally(
                request_id, team, key_id, model, max_cost_nanousd, max_tokens, windows, team_limits
            ), stable=stable, run_order=run_order if stable else 0)
        except GatewayError:
            if tried:
                await self._release_lost(request_id, team, key_id, windows)
            raise

    async def _release_lost(self, request_id: str, team: str, key_id: str | None,
                            windows: Windows) -> None:
        """The reserve script may have run before its reply was lost: have the
        reconciler release that hold rather than leave it to expire."""
        await self._journal(JournalEntry(request_id, team, key_id, RELEASE_ONLY, windows.day,
                                         windows.month, windows.minute, 0, 0, 0))

    async def precheck(self, *, team: str, team_limits: Limits | None, key_id: str | None,
                       key_limits: Limits | None, counted: bool = True) -> None:
        """Refuse now what any reserve of this team would refuse (a hard limit reached,
        its rpm used up), holding and counting nothing: for a large body, before it is
        read and parsed. Redis out of reach: nothing is decided here (the reserve's
        fail policy will be)."""
        if self._suspect_down():
            return
        now = self._keys.clock()
        windows = self._keys.windows(now)
        try:
            reply = await self._scripts.reserve(
                request_id=f"precheck:{next(_PRECHECKS)}", team=team, windows=windows, amount=1, tokens=0,
                key_id=key_id, team_limits=team_limits, key_limits=key_limits,
                previous_weight=windows.previous_minute_weight(now), counted=counted,
                dry_run=True)
        except REDIS_UNAVAILABLE as exc:
            self._mark_down("precheck", exc)
            return
        if not reply.ok:
            raise refusal(reply, team=team, key_id=key_id, windows=windows, now=now, amount=1,
                          tokens=0)

    async def _reserve_in_redis(self, request_id: str, team: str, windows: Windows, now: float,
                                amount: int, tokens: int, key_id: str | None,
                                team_limits: Limits | None, key_limits: Limits | None,
                                counted: bool = True) -> ReserveReply | None:
        """The reserve script's reply, or None when Redis did not answer."""
        try:   # the call is bounded (scripts.CALL_TIMEOUT_S, or the client's own)
            reply = await self._scripts.reserve(
                request_id=request_id, team=team, windows=windows, amount=amount,
                tokens=tokens, key_id=key_id, team_limits=team_limits, key_limits=key_limits,
                previous_weight=windows.previous_minute_weight(now), counted=counted)
        except REDIS_UNAVAILABLE as exc:
            self._mark_down("reserve", exc)
            return None
        self._last_ok = time.monotonic()
        return reply

    def settle(
        self,
        reservation: Reservation,
        *,
        input_tokens: int,
        output_tokens: int,
        cost_nanousd: int,
        model: str | None = None,
        cached_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> asyncio.Future[None]:
        """Bill the real cost and release the rest. Never raises.
        ``cached_tokens``, ``cache_write_tokens``: of ``input_tokens``, those read
        from a prompt cache and those written to it (ledger).

        ``model`` is the model that answered, for the ledger (a fallback's
        answer is not filed under the first choice); default the reserved one.
        ``RELEASE_ONLY`` ("") frees the hold and records nothing, so the same
        request id can still be billed later (a batch line run again).

        Returns a future, done once the spend is in Redis or in the local
        journal. Awaiting it is optional: the settle is queued before this
        returns, goes with its batch, and ``aclose`` waits for it. Cancelling
        the future (a client that disconnects while its caller waits) cancels
        nothing: what the upstream generated is billed all the same.
        """
        res = reservation
        self.leases.release(res)
        if res.local:
            self._local.settle(res.team, res.amount, cost_nanousd)
        # A cost above the hold is an overdraft (the upstream counted more than the
        # gateway reserved: gateway/money/ceiling.py): billed exactly all the same.
        if not 0 <= cost_nanousd <= MAX_SETTLE_NANOUSD:
            # Never an outage (a Redis refusal of the number): clamp, and say so.
            log.error("budget: request %s cost %d nano-USD is out of range; settling %d",
                      res.request_id, cost_nanousd, min(max(cost_nanousd, 0), MAX_SETTLE_NANOUSD))
            cost_nanousd = min(max(cost_nanousd, 0), MAX_SETTLE_NANOUSD)
        entry = res.journal_entry(input_tokens, output_tokens, cost_nanousd,
                                  res.model if model is None else model, cached_tokens,
                                  cache_write_tokens)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._suspect_down():
            self._journal_then(entry, done)
        else:
            self._queue(entry).add_done_callback(partial(self._settled, entry, done))
        return done

    def _settled(self, entry: JournalEntry, done: asyncio.Future[None],
                 queued: asyncio.Future[SettleReply]) -> None:
        """The batch's reply (no task per request): noted, or the entry journaled."""
        failure = (ConnectionError("settle cancelled") if queued.cancelled()
                   else queued.exception())
        if failure is None:
            self._last_ok = time.monotonic()
            _finish(done)
            self._note_settled(entry, queued.result())
            return
        if isinstance(failure, REDIS_UNAVAILABLE):
            self._mark_down("settle", failure)
        else:   # Redis answered, with an error: a bug, not an outage (the replay quarantines it)
            log.error("budget: settling request %s failed: %r", entry.request_id, failure)
        self._journal_then(entry, done)

    def _journal_then(self, entry: JournalEntry, done: asyncio.Future[None]) -> None:
        task = asyncio.ensure_future(self._journal(entry))
        self._journaling.add(task)
        task.add_done_callback(self._journaling.discard)
        task.add_done_callback(lambda _: _finish(done))

    async def _journal(self, entry: JournalEntry) -> None:
        try:
            await self.journal.append(entry)
        except Exception:
            log.exception("budget: could not journal request %s: %s", entry.request_id, entry)

    def _queue(self, entry: JournalEntry) -> asyncio.Future[SettleReply]:
        return self._scripts.queue_settle(  # bounded in the batch's one call
            request_id=entry.request_id, team=entry.team,
            windows=Windows(entry.day, entry.month, entry.minute), key_id=entry.key_id,
            model=entry.model, input_tokens=entry.input_tokens,
            output_tokens=entry.output_tokens, cost=entry.cost_nanousd, stable=entry.stable,
            at_ms=entry.at_ms, cached_tokens=entry.cached_tokens,
            cache_write_tokens=entry.cache_write_tokens)

    async def _apply(self, entry: JournalEntry) -> None:
        """Settle one journalled entry now; raises what Redis raised (journal replay)."""
        self._note_settled(entry, await self._queue(entry))

    def _note_settled(self, entry: JournalEntry, reply: SettleReply) -> None:
        last = self._last.get(entry.team)
        if last is not None and entry.day == self._keys.windows().day:
            self._last[entry.team] = (reply.team, last[1])
            self._soft[(entry.team, None)] = last[1].soft_reached(reply.team)

    def soft_limited(self, team: str, key_id: str | None = None) -> bool:
        """Whether the team (or that key) was above a soft limit at its last reply here.

        No round trip: the routing policy asks before choosing a model.
        """
        if key_id is not None and (team, key_id) in self._soft:
            return self._soft[(team, key_id)]
        return self._soft.get((team, None), False)

    def _remember(self, team: str, key_id: str | None, reply: ReserveReply) -> bool:
        self._last[team] = (reply.team, reply.team_limits)
        self._soft[(team, None)] = bool(reply.soft & 1)
        if key_id is not None:
            self._soft[(team, key_id)] = reply.soft != 0
        return reply.soft != 0

    def _suspect_down(self) -> bool:
        return time.monotonic() < self._down_until

    def _mark_down(self, what: str, exc: BaseException) -> None:
        """Skip Redis for a moment after a failure, so an outage costs one timeout,
        not one per request. A lone timeout while other calls keep succeeding is
        a slow reply under load, not an outage: it fails only its own request."""
        now = time.monotonic()
        if isinstance(exc, TimeoutError | RedisTimeoutError) and (
                now - self._last_ok < CALL_TIMEOUT_S):
            return
        if not self._suspect_down():
            log.warning("budget: Redis unavailable during %s: %r", what, exc)
        self._down_until = now + DOWN_BACKOFF_S

    def _reserve_locally(self, request_id: str, team: str, key_id: str | None, model: str,
                         amount: int, tokens: int, windows: Windows,
                         team_limits: Limits | None) -> Reservation:
        if self._settings.fail_policy == "fail_closed":
            raise ServiceUnavailable(
                "The budget store (Redis) is unreachable, and budget.fail_policy is "
                "fail_closed: requests are refused until it is back.",
                code="budget_store_unavailable",
            )
        hit = self._local.admit(team, amount, windows.minute, self._remaining(team, team_limits))
        if hit == "rpm":
            raise rate_exceeded(team=team, key_id=None, scope="team", limit_name="rpm",
                                current=self._local.rpm, limit=self._local.rpm,
                                retry_after_s=windows.seconds_left_in_minute(self._keys.clock()))
        if hit is not None:
            raise fail_open_exceeded(team=team, cap=self._local.cap_nanousd, amount=amount)
        return Reservation(request_id, team, key_id, model, amount, tokens, windows,
                           soft_limited=self.soft_limited(team, key_id), local=True)

    def _remaining(self, team: str, team_limits: Limits | None) -> int | None:
        """Hard budget left as last seen (config limits if never seen), or None."""
        return hard_left(*(self._last.get(team)
                           or (ScopeFigures(), SoftHard.from_limits(team_limits))))

    async def ping(self) -> bool:
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                await self._redis.ping()
        except REDIS_UNAVAILABLE as exc:
            self._mark_down("ping", exc)
            return False
        except Exception:   # a bug here must not turn fail_closed into 503s for every team
            log.exception("budget: ping failed unexpectedly")
            return False
        self._down_until = 0.0
        return True

    async def reconcile_once(self) -> int:
        """Replay the journal into Redis if it is reachable; return entries applied."""
        if not self.journal.pending() and not self._suspect_down():
            return 0
        if not await self.ping():
            return 0
        applied = await self.journal.replay(self._apply, permanent=unreplayable)
        if not self.journal.pending():
            self._local.forget_spent()
        if applied:
            log.info("budget: reconciled %d journalled spends into Redis", applied)
        return applied

    async def run_reconciler(self, interval_s: float = 1.0) -> None:
        """Background task for the gateway lifespan; ends after ``aclose()``."""
        while not self._stopping.is_set():
            try:
                await self.reconcile_once()
            except Exception as exc:  # keep trying; never kill the task
                self._mark_down("reconcile", exc)
            try:
                await asyncio.wait_for(self._stopping.wait(), interval_s)
            except TimeoutError:
                pass

    async def aclose(self) -> None:
        """Stop the reconciler; wait for every queued settle to reach Redis or the journal."""
        self._stopping.set()
        await self._scripts.drain()
        while self._journaling:
            await asyncio.gather(*self._journaling, return_exceptions=True)


def _finish(done: asyncio.Future[None]) -> None:
    if not done.done():   # its caller may have stopped waiting (cancelled it)
        done.set_result(None)

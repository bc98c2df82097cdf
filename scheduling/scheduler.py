"""Admission per model: a concurrency limit, and a queue per pool.

    scheduler = PoolScheduler(model_config, backend.stats, slo_ttft_s=0.45)
    ticket = await scheduler.acquire("interactive", prompt_tokens=900, timeout=5.0)
    try:
        completion = await backend.complete(call)
    except BaseException as exc:
        scheduler.release(ticket, failed=exc)
        raise
    scheduler.release(ticket, ttft_s=completion.ttft_s)
    # a stream holds its slot until it is closed:
    stream = scheduler.holding(ticket, await backend.stream(call))

Why the gateway queues at all: an upstream (vLLM, the simulator) queues what
it cannot run, first come first served. Queueing here instead, in front of
it, lets interactive requests go first and batch work fill what is left.

The rules, in order:

- At most ``model.max_concurrency`` requests run (``scheduler.max_concurrency``
  per replica, default ``simulate.max_batch``, else 64), split among the
  gateway processes in front of it (``scheduling/fleet.py``). A static split
  leaves one replica's idle share unused while another queues; where the
  upstream publishes its load (``load_metrics``), a replica also takes its
  1/N of the slots the upstream reports free (``_limit``).
- Interactive is admitted first: a freed slot goes to the oldest interactive
  waiter (the newest once the queue is standing: adaptive LIFO), and only
  then to batch.
- Batch fills what is left, and backs off: never the last ``batch_reserve``
  of the slots, never while an interactive request waits, and never when
  the interactive TTFT predicted with this batch prompt admitted (queue wait
  + prefill backlog ÷ the learned prefill rate) passes ``batch_backoff`` ×
  the interactive SLO. An idle model admits batch work regardless, so it
  always progresses.
- A queue over its length is refused at once (429 ``queue_full``); a request
  that waited its pool's ``*_wait_s`` (or the request's deadline) is refused
  (503 ``queue_timeout``). Both carry ``retry-after``. Neither is retried on
  another model: the router already steers away from queues it can see.
- With ``scheduler.refuse_late``, interactive work is admitted only on time:
  a request whose predicted TTFT (the waiters ahead of it, first come first
  served, + the prefill backlog) or TPOT (the batch it would join) passes
  the SLO is refused at once (503 ``slo_unreachable``), and a waiter gives
  up once it has queued the SLO.

The uncontended path is a few attribute checks and one small object: no
task, no future. Counts a metrics exporter can read as plain attributes:
``scheduler.active`` (all pools), ``scheduler.lanes[pool].in_flight`` and
``scheduler.lanes[pool].queued``; the same totals are on ``LiveStats``
(``admitted``, ``queued``, ``queued_batch``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from core.config import GatewayConfig, ModelConfig
from core.errors import GatewayError, RateLimited, ServiceUnavailable
from core.types import LiveStats
from scheduling.scheduled_stream import ScheduledStream
from scheduling.shared_backlog import SharedBacklog
from scheduling.tickets import Lane, Ticket, Waiter

if TYPE_CHECKING:
    from backends.base import ChunkStream, Completion

DEFAULT_PREFILL_TOKENS_PER_S = 5000.0
DEFAULT_SLOT_S = 2.0     # how long a slot is held, until answers teach it


class PoolScheduler:
    def __init__(self, model: ModelConfig, stats: LiveStats, *, slo_ttft_s: float,
                 slo_tpot_s: float | None = None) -> None:
        cfg = model.scheduler
        self.name = model.name
        self.stats = stats
        self.configured = model.max_concurrency    # for all gateway replicas together
        self.max_concurrency = model.max_concurrency
        self.replicas = 1
        self.active = 0
        self.interactive = Lane("interactive", cfg.interactive_queue, cfg.interactive_wait_s)
        self.batch = Lane("batch", cfg.batch_queue, cfg.batch_wait_s)
        self.lanes = {"interactive": self.interactive, "batch": self.batch}
        self.batch_reserve = cfg.batch_reserve
        self.batch_limit = max(1, math.floor(self.max_concurrency * (1 - cfg.batch_reserve)))
        self.backoff_ttft_s = cfg.batch_backoff * slo_ttft_s
        self.lifo_after_s = cfg.interactive_lifo_after_s
        self.slo_ttft_s = slo_ttft_s
        self.slo_tpot_s = slo_tpot_s
        self.refuse_late = cfg.refuse_late
        self.share_backlog = cfg.refuse_late and cfg.shared_backlog
        self.shared: SharedBacklog | None = None   # the fleet's prefill backlog, in Redis
        sim = model.simulate
        # A batch of one's TPOT, scaled by concurrency until one is measured: the
        # simulator's knob; a remote model's is unknown until measured.
        self.base_tpot_s = sim.tpot_ms / 1000 if sim else None
        # Until the first answers teach it, the prefill rate is the simulator's
        # knob (or a mid-size GPU's); it is learned online from then on.
        self.default_prefill = sim.prefill_tokens_per_s if sim else DEFAULT_PREFILL_TOKENS_PER_S
        # The prefill backlog is modelled only at a known rate: the simulator's, or one
        # learned from real answers. A remote model answering non-streamed requests without
        # server timings teaches none, and a guessed rate would predict minutes of TTFT.
        self.rate_known = sim is not None
        stats.capacity = self.max_concurrency
        # A real upstream's slowdown with concurrency is unknown: its TPOT is what
        # is measured (an EWMA that already carries the load), not a guess scaled
        # by concurrency, which flagged every busy request "at-risk".
        stats.batch_slowdown = sim.batch_slowdown if sim else 0.0

    def share(self, replicas: int) -> None:
        """Admit this replica's share of the model's concurrency, when ``replicas``
        gateway processes front it (``scheduling/fleet.py``)."""
        self.replicas = replicas
        self.max_concurrency = max(1, math.ceil(self.configured / replicas))
        self.batch_limit = max(1, math.floor(self.max_concurrency * (1 - self.batch_reserve)))
        self.stats.capacity = self.max_concurrency
        if self.interactive.waiters or self.batch.waiters:
            self._wake()

    async def acquire(self, pool: str, prompt_tokens: int, timeout: float) -> Ticket:
        """A slot for one upstream call: at once if free, else after queueing.
        Raises ``RateLimited`` (queue full) or ``ServiceUnavailable`` (waited too long)."""
        lane = self.batch if pool == "batch" else self.interactive
        ahead = None    # the fleet's prefill backlog ahead, from Redis (shared_backlog.py)
        if self.refuse_late and lane is self.interactive:
            if self._sharing() and self.active < self._limit() and not lane.waiters:
                ahead = await self._take_shared(prompt_tokens)
            try:   # what is left of the SLO once this prompt is prefilled: the longest wait
                timeout = min(timeout, self._refuse_if_late(prompt_tokens, ahead))
            except ServiceUnavailable:
                self._give_back(prompt_tokens, ahead)
                raise
        if self.active < self._limit() and self._may_start(lane, prompt_tokens):
            return self._admit(lane, prompt_tokens, ahead)
        self._give_back(prompt_tokens, ahead)   # added again once admitted
        ticket = await self._wait(lane, prompt_tokens, min(timeout, lane.wait_s))
        if lane is self.interactive and self._sharing():
            await self._count_woken(ticket)
        return ticket

    async def _count_woken(self, ticket: Ticket) -> None:
        """A waiter given a slot joins the fleet's backlog in Redis now, and learns
        the prefill rate from the count ahead of it there, not from the heartbeat's
        figures (0.25 s old, which miss the other replicas' latest admissions)."""
        try:
            ahead = await self._take_shared(ticket.prompt_tokens)
        except BaseException:   # the client left while Redis answered: the slot goes back
            self._free(ticket)
            raise
        if ahead is not None:
            ticket.ahead = ahead

    def _sharing(self) -> bool:
        """Replicas share this model, and its backlog is modelled (a known rate)."""
        return self.shared is not None and self.replicas > 1 and self._rate_known()

    def _rate_known(self) -> bool:
        return self.rate_known or self.stats.learned_prefill() is not None

    def _rate(self) -> float:
        return self.stats.learned_prefill() or self.default_prefill

    async def _take_shared(self, prompt_tokens: int) -> float | None:
        assert self.shared is not None
        try:
            return await self.shared.add(prompt_tokens, self._rate())
        except BaseException:   # the client left while Redis answered: not admitted
            self._give_back(prompt_tokens, 0.0)
            raise

    def _give_back(self, prompt_tokens: int, ahead: float | None) -> None:
        if ahead is not None and self.shared is not None:
            self.shared.add_later(-prompt_tokens, self._rate())

    def _limit(self) -> int:
        """This replica's share of the model's concurrency, plus its 1/N of the
        slots free fleet-wide: as the other replicas reported their admissions
        while fresh, else as the upstream reported its load while fresh. Its own
        share stays its own: no other replica's borrowing takes it."""
        limit = self.max_concurrency
        stats = self.stats
        if self.replicas <= 1:
            return limit
        now = time.monotonic()
        if stats.peers_fresh(now):
            free = self.configured - stats.peer_own - stats.peer_admitted
            if free >= self.replicas:
                limit = min(self.configured,
                            max(limit, stats.peer_own + int(free // self.replicas)))
        elif stats.upstream_at and stats.upstream_fresh(now):
            free = self.configured - stats.upstream_running - stats.upstream_waiting
            if free >= self.replicas:
                limit = min(self.configured,
                            max(limit, stats.upstream_own + int(free // self.replicas)))
        return limit

    def _refuse_if_late(self, prompt_tokens: int, ahead: float | None = None) -> float:
        """On-time admission: refuse a request predicted to start past the TTFT
        SLO (queue wait + prefill backlog + its prompt); else the longest it may
        queue. The wait is the first-come-first-served one even when the queue
        serves its newest first: LIFO changes who is late, not how late the
        queue is on average, and a newcomer served first makes a waiter late.
        ``ahead``: the fleet's backlog as Redis counted it, else the heartbeat's."""
        stats = self.stats
        rate = self._rate()
        backlog = stats.fleet_backlog(rate, time.monotonic()) if ahead is None else ahead
        prefill = (backlog + prompt_tokens) / rate
        if self.active < self._limit() and not self.interactive.waiters:
            wait = 0.0      # a slot is free now (a borrowed one included)
        else:
            wait = stats.queue_wait_s(self.interactive.queued, DEFAULT_SLOT_S)
        if wait + prefill > self.slo_ttft_s:
            self._refuse(f"start it within the {self.slo_ttft_s * 1000:.0f} ms TTFT SLO "
                         f"(predicted {wait + prefill:.2f} s)")
        # Joining the batch slows every sequence in it: the TPOT it would see
        # (measured and rescaled, else the simulator's; a remote model's is unknown).
        if self.slo_tpot_s and (stats.tpot_s is not None or self.base_tpot_s is not None):
            tpot = stats.predicted_tpot_s(self.base_tpot_s or 0.0)
            if tpot > self.slo_tpot_s * (1 + 1e-9):
                self._refuse(f"decode it within the {self.slo_tpot_s * 1000:.0f} ms TPOT SLO "
                             f"(predicted {tpot * 1000:.1f} ms)")
        return self.slo_ttft_s - prefill

    def _refuse(self, why: str) -> None:
        raise ServiceUnavailable(f"Model {self.name} is too busy to {why}.",
                                 code="slo_unreachable", headers=self._retry_after(self.interactive))

    def _may_start(self, lane: Lane, prompt_tokens: int) -> bool:
        if lane is self.interactive:
            return not lane.waiters
        return not self.interactive.waiters and not lane.waiters and self._batch_room(prompt_tokens)

    def _batch_room(self, prompt_tokens: int) -> bool:
        if self.active == 0:
            return True
        if self.batch.in_flight >= self.batch_limit:
            return False
        stats = self.stats
        rate = self._rate()
        backlog = stats.fleet_backlog(rate, time.monotonic()) + prompt_tokens
        return stats.queue_wait_s(0, 0.0) + backlog / rate < self.backoff_ttft_s

    def _admit(self, lane: Lane, prompt_tokens: int, shared: float | None = None, *,
               later: bool = True) -> Ticket:
        """``shared``: the fleet's backlog ahead, already counted in Redis; ``later``
        False: the caller counts it there (``_count_woken``)."""
        now = time.monotonic()
        stats = self.stats
        rate = self._rate()
        known = self._rate_known()
        ahead = stats.add_backlog(prompt_tokens, rate, now) if known else 0.0
        if shared is not None:
            ahead = shared
        elif later and self.shared is not None and self._sharing():
            self.shared.add_later(prompt_tokens, rate)
        self.active += 1
        lane.in_flight += 1
        stats.admitted = self.active
        return Ticket(lane, prompt_tokens, ahead, now)

    async def _wait(self, lane: Lane, prompt_tokens: int, timeout: float) -> Ticket:
        if lane.queued >= lane.max_queue:
            raise RateLimited(
                f"Model {self.name} has {lane.queued} {lane.pool} requests queued, its limit; "
                "try again shortly.", code="queue_full", headers=self._retry_after(lane))
        waiter = Waiter(asyncio.get_running_loop().create_future(), prompt_tokens)
        lane.waiters.append(waiter)
        self._count_queues()
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                return await waiter.future
        except BaseException as exc:
            self._give_up(lane, waiter)
            if isinstance(exc, TimeoutError):
                raise ServiceUnavailable(
                    f"Model {self.name} was busy: the request waited {timeout:.1f} s in the "
                    f"{lane.pool} queue.", code="queue_timeout",
                    headers=self._retry_after(lane)) from None
            raise

    def _give_up(self, lane: Lane, waiter: Waiter) -> None:
        future = waiter.future
        if future.done() and not future.cancelled():
            # Granted just as the wait ended: pass the slot on.
            self._free(future.result())
            return
        future.cancel()
        try:
            lane.waiters.remove(waiter)
        except ValueError:
            pass
        self._count_queues()

    def _retry_after(self, lane: Lane) -> dict[str, str]:
        wait = self.stats.queue_wait_s(lane.queued, 1.0)
        return {"retry-after": str(max(1, math.ceil(wait)))}

    def _count_queues(self) -> None:
        self.interactive.queued = len(self.interactive.waiters)
        self.batch.queued = len(self.batch.waiters)
        self.stats.queued = self.interactive.queued
        self.stats.queued_batch = self.batch.queued
        # A standing queue serves newcomers first: they wait for a slot, not the queue.
        self.stats.lifo = bool(self.interactive.waiters) and self._standing()

    def release(self, ticket: Ticket, *, failed: BaseException | None = None,
                ttft_s: float | None = None) -> None:
        """Free the slot (once; later calls do nothing) and learn from the call."""
        if ticket.released:
            return
        stats = self.stats
        stats.observe_slot(time.monotonic() - ticket.started)
        if failed is None:
            stats.observe_outcome(True)
            if ttft_s:
                ticket.learn_prefill(stats, ttft_s)   # a stream has at its first token
        elif _counts_as_failure(failed):
            stats.observe_outcome(False)
        self._free(ticket)

    def _free(self, ticket: Ticket) -> None:
        if ticket.released:
            return
        ticket.released = True
        self.active -= 1
        ticket.lane.in_flight -= 1
        self.stats.admitted = self.active
        if self.interactive.waiters or self.batch.waiters:
            self._wake()

    def _wake(self) -> None:
        """Hand free slots to waiters: interactive first, then batch if it may."""
        limit = self._limit()
        while self.active < limit:
            lane = self.interactive if self.interactive.waiters else self.batch
            if not lane.waiters:
                break
            newest = lane is self.interactive and self._standing()
            waiter = lane.waiters[-1] if newest else lane.waiters[0]
            if not waiter.future.done():      # else it gave up: drop it
                if lane is self.batch and not self._batch_room(waiter.prompt_tokens):
                    break
                waiter.future.set_result(self._admit(lane, waiter.prompt_tokens,
                                                     later=lane is not self.interactive))
            if newest:
                lane.waiters.pop()
            else:
                lane.waiters.popleft()
        self._count_queues()

    def _standing(self) -> bool:
        """Adaptive LIFO (as in Facebook's "Fail at scale"): once the oldest
        interactive waiter has queued ``interactive_lifo_after_s``, the queue is
        standing, and serving it in order would make every answer late. The
        newest waiter goes first then: it can still meet the SLO, and the
        oldest reach their deadline (503, retry-after) instead."""
        return time.monotonic() - self.interactive.waiters[0].since > self.lifo_after_s

    def finished(self, ticket: Ticket, completion: Completion) -> Completion:
        self.release(ticket, ttft_s=completion.ttft_s)
        return completion

    def holding(self, ticket: Ticket, stream: ChunkStream) -> ScheduledStream:
        return ScheduledStream(self, ticket, stream)


def _counts_as_failure(exc: BaseException) -> bool:
    """The model's fault: a retryable upstream failure, not a client's bad
    request or the client leaving."""
    return isinstance(exc, GatewayError) and exc.retryable


def build_schedulers(config: GatewayConfig, stats: Mapping[str, LiveStats]
                     ) -> dict[str, PoolScheduler]:
    """One scheduler per model, sharing the model's backend ``LiveStats``."""
    slo = config.pools.interactive
    return {m.name: PoolScheduler(m, stats[m.name], slo_ttft_s=slo.ttft_ms / 1000,
                                  slo_tpot_s=slo.tpot_ms / 1000)
            for m in config.models}


def share_backlogs(schedulers: Mapping[str, PoolScheduler], redis: Any, prefix: str) -> None:
    """Give each model that admits on time its shared backlog (used only while
    more than one replica is live), unless its ``scheduler.shared_backlog`` is off."""
    for name, scheduler in schedulers.items():
        if scheduler.share_backlog:
            scheduler.shared = SharedBacklog(redis, prefix, name)

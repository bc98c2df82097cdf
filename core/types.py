"""Live latency and load of a model, shared by backends, policies and the app
(what an upstream says a request used is ``core.usage``)."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

EWMA_ALPHA = 0.2
PREFILL_CLAMP = 2.0      # a prefill-rate sample counts as at most 2x (or 1/2) the estimate
KV_HIGH = 0.9         # upstream KV-cache use past which new sequences start to wait
PEER_STALE_S = 1.0    # the other replicas' figures, older than this, are ignored
MAX_OTHERS_RATIO = 16.0   # the other replicas' prefill backlog, at most this many times ours
WINDOW = 256          # samples in the windowed p95
# A model that has answered nothing for this long is judged by its defaults again:
# what was learned from its last answers (TPOT, prefill rate) no longer counts. A
# model routed away from for its latency gets no answer to learn it is fast again.
LEARNED_STALE_S = 30.0
P95_EVERY = 16        # new samples between two refreshes of a p95


@dataclass(slots=True)
class LiveStats:
    """Live latency and load of one model (all its replicas), from real responses.

        stats.observe_ttft(0.21); stats.ttft_s, stats.ttft_p95     # EWMA, windowed p95
        stats.predicted_ttft_s(prompt_tokens=900, default_prefill=5000)
        stats.predicted_tpot_s(default=0.03)

    Written by two hands, each cheaply (a few float operations per request):
    the backend (``in_flight``, ``requests``, TTFT, TPOT, ``observe_failure``)
    and the gateway's scheduler (``scheduling/scheduler.py``: admitted, queued,
    capacity, slot time, the prefill backlog, the learned prefill rate, the
    error rate). The router reads the predictions.

    Nothing here goes through Redis on a request: every gateway process
    schedules its own admissions. The fleet's heartbeat (``scheduling/fleet.py``,
    one round trip every 0.25 s) brings the number of live replicas, so that
    each admits its share of ``max_concurrency``, and the other replicas' own
    figures per model (``take_peers``: their prefill backlog and admitted
    count), which, while fresh (``PEER_STALE_S``), join this process's in the
    predictions: the queue at a shared upstream is the fleet's.

    The upstream's own figures, when it publishes them (``load_metrics``,
    ``backends/load_signals.py``, about 1 Hz off the request path), are the
    fleet's: sequences running and requests waiting at the upstream from every
    gateway replica, and its KV-cache use. While fresh (``upstream_stale_s``)
    they stand for the batch a request would join in the TPOT predicted, and
    the requests waiting at the upstream that this process did not admit (the
    other replicas') join the prefill backlog of the TTFT predicted, at the mean
    prompt length admitted here; KV-cache use past ``KV_HIGH``, where a slot
    looks free, adds a wait for the first running sequence to finish. Stale,
    the predictions fall back to what this process admitted.
    """

    ttft_s: float | None = None        # EWMA of time to first token
    tpot_s: float | None = None        # EWMA of time per output token
    in_flight: int = 0                 # calls open at the backend
    requests: int = 0                  # answers received
    last_failure: float = 0.0
    admitted: int = 0                  # scheduler slots held, all pools
    queued: int = 0                    # interactive requests waiting in the scheduler
    queued_batch: int = 0              # batch requests waiting in the scheduler
    lifo: bool = False                 # the interactive queue serves its newest first
    capacity: int = 16                 # the scheduler's concurrency limit
    batch_slowdown: float = 0.04       # TPOT grows by this share per extra sequence
    error_rate: float = 0.0            # EWMA of failed attempts
    prefill_tokens_per_s: float | None = None   # learned: tokens prefilled per second
    slot_s: float | None = None        # EWMA of how long a request holds a slot
    load: float = 1.0                  # EWMA of sequences running when TPOT was measured
    backlog_tokens: float = 0.0        # prompt tokens admitted and not yet prefilled ...
    backlog_at: float = 0.0            # ... as of this time (the backlog drains at the rate)
    upstream_running: float = 0.0      # sequences the upstream runs (all gateway replicas')
    upstream_waiting: float = 0.0      # requests queued at the upstream itself
    upstream_kv: float | None = None   # KV-cache use, 0..1 (None: not published)
    upstream_at: float = 0.0           # when they were read (monotonic); 0: never
    upstream_stale_s: float = 3.0      # older readings are ignored
    upstream_capacity: int = 0         # the model's max_concurrency, all gateway replicas
    upstream_others: float = 0.0       # prompt tokens waiting there that others admitted
    upstream_ratio: float = 0.0        # EWMA of their backlog over ours, at the readings
    upstream_own: int = 0              # what this process had admitted at the reading
    peer_backlog: float = 0.0          # the other gateway replicas' prefill backlog ...
    peer_admitted: float = 0.0         # ... and admitted count, as they reported it ...
    peer_at: float = 0.0               # ... at this time (monotonic); 0: no peers
    peer_own: int = 0                  # what this process had admitted when they were taken
    prompt_mean: float | None = None   # EWMA of the prompt tokens admitted
    backlog_rate: float = 0.0          # the prefill rate the backlog was last drained at
    learned_at: float = 0.0            # the last latency sample (monotonic); 0: none
    ttft_window: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    tpot_window: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    _p95: dict[str, tuple[int, float | None]] = field(default_factory=dict)
    _seen: dict[str, int] = field(default_factory=lambda: {"ttft": 0, "tpot": 0})

    def _learning(self) -> None:
        """A latency sample is about to be taken: what was learned before it starts
        again if it is stale (``LEARNED_STALE_S``), rather than being averaged in."""
        now = time.monotonic()
        if not self.learned(now):
            self.ttft_s = self.tpot_s = self.prefill_tokens_per_s = None
        self.learned_at = now

    def observe_ttft(self, seconds: float) -> None:
        self._learning()
        self.ttft_s = _ewma(self.ttft_s, seconds)
        self.ttft_window.append(seconds)
        self._seen["ttft"] += 1

    def observe_tpot(self, seconds: float) -> None:
        self._learning()
        self.tpot_s = _ewma(self.tpot_s, seconds)
        self.tpot_window.append(seconds)
        self._seen["tpot"] += 1
        self.load += EWMA_ALPHA * (max(1.0, self.running()) - self.load)

    def learned(self, now: float) -> bool:
        """Whether the learned TPOT and prefill rate are recent enough to count."""
        return now - self.learned_at <= LEARNED_STALE_S

    def learned_prefill(self) -> float | None:
        """The learned prefill rate (tokens/s) while it counts, else None: what the
        router's predictions and the scheduler's admission both read."""
        rate = self.prefill_tokens_per_s
        if rate is None or not self.learned(time.monotonic()):
            return None
        return rate

    def observe_failure(self) -> None:
        self.last_failure = time.monotonic()

    def observe_outcome(self, ok: bool) -> None:
        self.error_rate += EWMA_ALPHA * ((0.0 if ok else 1.0) - self.error_rate)

    @property
    def ttft_p95(self) -> float | None:
        return self._percentile("ttft", self.ttft_window)

    @property
    def tpot_p95(self) -> float | None:
        return self._percentile("tpot", self.tpot_window)

    def _percentile(self, key: str, window: deque[float]) -> float | None:
        # Sorting the window on every read would cost more than the request;
        # the p95 is refreshed after every P95_EVERY new samples instead.
        seen = self._seen[key]
        cached = self._p95.get(key)
        if cached is not None and seen - cached[0] < P95_EVERY:
            return cached[1]
        ordered = sorted(window)
        value = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else None
        self._p95[key] = (seen, value)
        return value

    def backlog(self, rate: float, now: float) -> float:
        """Prompt tokens this process admitted still to prefill: a fluid model that
        drains at this process's share of ``rate``, the upstream's (``own_share``)."""
        own = self.backlog_tokens
        if own <= 0:
            return 0.0
        return max(0.0, own - rate * (now - self.backlog_at) * self.own_share(now))

    def own_share(self, now: float) -> float:
        """The share of the upstream's prefill rate that drains this process's backlog:
        the backlogs drain in proportion to their size, the other replicas' as they
        reported it while fresh, else as the upstream's readings measured it."""
        if self.peers_fresh(now):
            theirs = self.peer_backlog
            return self.backlog_tokens / (self.backlog_tokens + theirs) if theirs > 0 else 1.0
        if self.upstream_at and self.upstream_fresh(now):
            return 1.0 / (1.0 + self.upstream_ratio)
        return 1.0

    def add_backlog(self, tokens: int, rate: float, now: float) -> float:
        """Admit ``tokens`` to prefill; returns the backlog they join, fleet-wide while
        the upstream's readings are fresh (what the prefill rate is learned from)."""
        ahead = self.backlog(rate, now)
        self.backlog_tokens, self.backlog_at, self.backlog_rate = ahead + tokens, now, rate
        self.prompt_mean = _ewma(self.prompt_mean, float(tokens))
        if self.peers_fresh(now):
            return ahead + self.peers_backlog(rate, now)
        if self.upstream_at and self.upstream_fresh(now):
            return ahead + self.upstream_others
        return ahead

    def peers_fresh(self, now: float) -> bool:
        return self.peer_at > 0 and now - self.peer_at <= PEER_STALE_S

    def take_peers(self, backlog: float, admitted: float, at: float) -> None:
        """The other replicas' figures for this model (``scheduling/fleet.py``),
        summed, as of ``at``; no other replica: ``at`` 0."""
        self.peer_backlog, self.peer_admitted, self.peer_at = backlog, admitted, at
        self.peer_own = self.admitted

    def peers_backlog(self, rate: float, now: float) -> float:
        """The peers' backlog now: what they reported, drained since at their
        share of the upstream's prefill rate (``backlog`` drains the rest)."""
        theirs = self.peer_backlog
        if theirs <= 0:
            return 0.0
        mine = max(self.backlog_tokens, 0.0)
        return max(0.0, theirs - rate * (now - self.peer_at) * theirs / (theirs + mine))

    def fleet_backlog(self, rate: float, now: float) -> float:
        """This process's prefill backlog, plus the other replicas': as they
        reported it while fresh, else as the upstream's waiting requests."""
        own = self.backlog(rate, now)
        if self.peers_fresh(now):
            return own + self.peers_backlog(rate, now)
        if self.upstream_at and self.upstream_fresh(now):
            # The others' share, as measured at the reading, applied to this
            # replica's backlog now: a 1 s old count of theirs is stale at TTFT
            # scale, but behind one load balancer their load moves with ours.
            return own * (1.0 + self.upstream_ratio) if own > 0 else self.upstream_others
        return own

    def take_upstream(self, running: float, waiting: float, kv: float | None, now: float
                      ) -> None:
        """An upstream reading (``backends/load_signals.py``)."""
        self.upstream_running, self.upstream_waiting, self.upstream_kv = running, waiting, kv
        waiting_tokens = waiting * (self.prompt_mean or 0.0)
        own = self.backlog(self.backlog_rate, now) if self.backlog_rate else 0.0
        self.upstream_others = max(0.0, waiting_tokens - own)
        ratio = min(MAX_OTHERS_RATIO, self.upstream_others / max(own, self.prompt_mean or 1.0))
        self.upstream_ratio = _ewma(self.upstream_ratio if self.upstream_at else None, ratio)
        self.upstream_own = self.admitted
        self.upstream_at = now

    def observe_prefill(self, tokens: float, ttft_s: float) -> None:
        """``tokens`` (the backlog ahead plus the prompt) were prefilled in ``ttft_s``."""
        if ttft_s > 0 and tokens > 0:
            self._learning()
            sample, current = tokens / ttft_s, self.prefill_tokens_per_s
            if current is not None:   # one answer whose queue was miscounted moves it little
                sample = min(max(sample, current / PREFILL_CLAMP), current * PREFILL_CLAMP)
            self.prefill_tokens_per_s = _ewma(current, sample)

    def observe_slot(self, seconds: float) -> None:
        self.slot_s = _ewma(self.slot_s, seconds)

    def queue_wait_s(self, ahead: int, fallback_slot_s: float) -> float:
        """Expected wait of a request with ``ahead`` requests queued before it:
        slots free at ``capacity / slot time`` per second."""
        if ahead <= 0 and self.admitted < self.capacity:
            return 0.0
        return (ahead + 1) * (self.slot_s or fallback_slot_s) / self.capacity

    def upstream_fresh(self, now: float) -> bool:
        return self.upstream_at > 0 and now - self.upstream_at <= self.upstream_stale_s

    def kv_wait_s(self, fallback_slot_s: float) -> float:
        """KV-cache pressure at the upstream past KV_HIGH (fresh readings only): a new
        sequence waits, up to, at a full cache, for the first of the running ones
        to finish (a slot time over the sequences running)."""
        kv = self.upstream_kv
        if kv is None or kv <= KV_HIGH or not self.upstream_fresh(time.monotonic()):
            return 0.0
        slot_s = self.slot_s or fallback_slot_s
        return (min(kv, 1.0) - KV_HIGH) / (1 - KV_HIGH) * slot_s / max(1.0, self.running())

    def predicted_ttft_s(self, prompt_tokens: int, default_prefill: float,
                         fallback_slot_s: float = 2.0) -> float:
        """Queue wait + (backlog ahead, fleet-wide + this prompt) / the learned
        prefill rate."""
        now = time.monotonic()
        rate = self.learned_prefill() or default_prefill
        prefill = (self.fleet_backlog(rate, now) + prompt_tokens) / rate
        ahead = 0 if self.lifo else self.queued
        wait = self.queue_wait_s(ahead, fallback_slot_s)
        if self.upstream_kv is not None and wait == 0.0:
            # A queue for a slot already waits for sequences to finish: the KV
            # cache adds a wait only where a slot looks free.
            wait = self.kv_wait_s(fallback_slot_s)
        return wait + prefill

    def running(self) -> float:
        """The batch a request would join: what this process and, while fresh, the
        other replicas admitted, or the upstream's count, while fresh, if larger."""
        ours = float(self.admitted)
        if not (self.peer_at or self.upstream_at):
            return ours
        now = time.monotonic()
        if self.peers_fresh(now):
            ours += self.peer_admitted
            if self.peer_at >= self.upstream_at:   # the fresher count wins
                return ours
        if self.upstream_fresh(now):
            return max(ours, self.upstream_running)
        return ours

    def predicted_tpot_s(self, default: float) -> float:
        """TPOT follows concurrency: the measured one, rescaled from the load it
        was measured at to the load this request would join."""
        running = self.running()
        if self.tpot_s is None or not self.learned(time.monotonic()):
            return default * (1 + self.batch_slowdown * running)
        capacity = max(self.capacity, self.upstream_capacity)
        now = 1 + self.batch_slowdown * min(running, capacity - 1)
        return self.tpot_s * now / (1 + self.batch_slowdown * (self.load - 1))


def _ewma(current: float | None, sample: float) -> float:
    return sample if current is None else current + EWMA_ALPHA * (sample - current)

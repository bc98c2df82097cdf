"""A circuit breaker per model: stop sending to an upstream that keeps failing.

    breaker = Breaker(config.breaker)
    with breaker.attempt() as trial:
        if not trial.allowed: ...skip this model...
        ... call ...
        trial.ok()            # or trial.failed(), or trial.rest(retry_after_s)

closed --(N failures in a row, or error rate over the window)--> open
open --(cooldown passed)--> half_open: one probe request goes through
half_open --probe ok--> closed;  --probe failed--> open again
half_open --probe left without a verdict--> half_open, probe released

A verdict is only ``ok()`` or ``failed()``. A call that ends any other way (an
upstream 400, a 429, a queue refusal, a ``total_s`` timeout, an exception, the
client leaving) says nothing about the upstream's health: leaving the ``with``
block releases its probe, so the next request probes instead. Before this, such
a probe held the model half-open for good.

An upstream's 429 rests the model until its ``Retry-After``, capped at
``breaker.max_rest_s`` (a ``Retry-After: 99999999`` once took a model out for
three years). A resting model's state reads ``resting``.

An open breaker (or a resting model) takes the model out of routing's
candidates and is skipped by the attempt loop. Its state is in ``/metrics``
(``routegate_breaker_state``) and ``/readyz``.

Across replicas (``fleet_health.py``): a breaker reports its own opens,
closes and rests through ``on_change`` (no I/O: the fleet loop publishes
them), and takes the other replicas' verdicts through ``hold`` (another
replica's open breaker), ``rest_until(..., shared=True)`` and ``close``.
With ``coordinated`` set, an open breaker's cooldown ending is not enough
to probe: the fleet grants one replica the probe (``grant_probe``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from core.escalation_config import BreakerConfig

CLOSED, OPEN, HALF_OPEN, RESTING = "closed", "open", "half_open", "resting"
STATE_CODE = {CLOSED: 0, OPEN: 1, HALF_OPEN: 2, RESTING: 3}


class Trial:
    """One call's claim on its model's breaker (``Breaker.attempt``).

    Only a probe holds anything; plain calls share one reusable instance, so
    the attempt loop allocates nothing per request when the breaker is closed.
    """

    __slots__ = ("_breaker", "_held", "allowed", "probe")

    def __init__(self, breaker: Breaker, *, allowed: bool, probe: bool = False) -> None:
        self._breaker = breaker
        self.allowed = allowed
        self.probe = probe
        self._held = probe          # a probe's claim, until a verdict or the block's end

    def __enter__(self) -> Trial:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._held:      # release(), inline: this runs on every attempt
            self._held = False
            self._breaker._probing = False

    def ok(self) -> None:
        """The upstream answered: counts for it (and closes a half-open breaker)."""
        if self.allowed:
            self._breaker._settle(self, ok=True)

    def failed(self) -> None:
        """The upstream failed retryably: counts against it (a probe reopens it)."""
        if self.allowed:
            self._breaker._settle(self, ok=False)

    def rest(self, seconds: float) -> None:
        """The upstream asked us to wait (a 429): rest the model, release a probe."""
        self._breaker.rest_until(self._breaker._clock() + seconds)
        self.release()

    def release(self) -> None:
        """No verdict: a probe's claim goes back, so the next request may probe."""
        if self._held:
            self._held = False
            self._breaker._probing = False


class Breaker:
    """One model's breaker; ``clock`` is injectable for tests (monotonic seconds)."""

    def __init__(self, config: BreakerConfig,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._enabled = config.enabled      # read on every attempt: once
        self._clock = clock
        self._state = CLOSED
        self._consecutive = 0
        # Outcomes per whole second, [second, requests, failures]: O(1) a request and
        # one small list a second (a tuple per request piled up 100k objects for the GC).
        self._window: deque[list[int]] = deque()
        self._opened_at = 0.0
        self._probing = False
        self._resting_until = 0.0
        # Another replica's verdict: not available until then (monotonic).
        self._held_until = 0.0
        self.coordinated = False
        self._probe_granted = False
        # (state, seconds): "open" with the cooldown, "rest" with its length, "closed".
        self.on_change: Callable[[str, float], None] | None = None
        self._plain = Trial(self, allowed=True)
        self._refused = Trial(self, allowed=False)

    @property
    def state(self) -> str:
        """closed, open, half_open, or resting (an upstream 429's Retry-After)."""
        now = self._clock()
        if now < self._resting_until:
            return RESTING
        return OPEN if now < self._held_until else self._state

    def available(self) -> bool:
        """Whether routing may pick this model now (no side effect)."""
        now = self._clock()
        if now < self._resting_until or now < self._held_until:
            return False
        if self._state == OPEN:
            if self.coordinated and not self._probe_granted:
                return False
            return now - self._opened_at >= self.config.cooldown_s
        return not (self._state == HALF_OPEN and self._probing)

    def attempt(self) -> Trial:
        """Claim a call on this model; in half-open, only the one probe.

        Use it as ``with breaker.attempt() as trial:``, so a probe is released
        however the block is left.
        """
        if not self.available():
            return self._refused
        if self._state == OPEN:
            self._state = HALF_OPEN
        if self._state != HALF_OPEN:
            return self._plain
        self._probing = True
        return Trial(self, allowed=True, probe=True)

    def rest_until(self, until: float, *, shared: bool = False) -> None:
        """Skip this model until ``until`` (monotonic, at most ``max_rest_s`` away):
        the upstream asked us to (or, ``shared``, asked another replica)."""
        now = self._clock()
        until = min(until, now + self.config.max_rest_s)
        if until <= self._resting_until:
            return
        self._resting_until = until
        if not shared and self.on_change is not None:
            self.on_change(RESTING, until - now)

    # -- the other replicas' verdicts (fleet_health.py) --

    def hold(self, until: float) -> None:
        """Another replica's breaker is open (or it probes): skip the model until then."""
        self._held_until = max(self._held_until, until)

    def release_hold(self) -> None:
        self._held_until = 0.0

    def grant_probe(self) -> None:
        """This replica may probe (it won the fleet's probe claim): open, cooled down."""
        self._held_until = 0.0
        self._probe_granted = True
        if self._state == CLOSED:
            self._state = OPEN
        if self._state == OPEN:
            self._opened_at = self._clock() - self.config.cooldown_s

    def close(self) -> None:
        """Another replica's probe passed: closed here too."""
        self._held_until = 0.0
        if self._state != CLOSED and not self._probing:
            self._state, self._consecutive = CLOSED, 0
            self._window.clear()
        self._probe_granted = False

    def _settle(self, trial: Trial, *, ok: bool) -> None:
        if not self._enabled:
            return
        if trial.probe:
            if trial._held:     # a second verdict on one probe changes nothing
                trial._held = self._probing = False
                self._close() if ok else self._open(self._clock())
            return
        now = self._clock()
        second = int(now)
        window = self._window
        if not window or window[-1][0] != second:
            window.append([second, 0, 0])
            while now - window[0][0] > self.config.window_s:
                window.popleft()
        bucket = window[-1]
        bucket[1] += 1
        if not ok:
            bucket[2] += 1
        self._consecutive = 0 if ok else self._consecutive + 1
        # Calls started before the breaker opened still count, but only a probe
        # moves an open or half-open breaker.
        if not ok and self._state == CLOSED and self._tripped():
            self._open(now)

    def _tripped(self) -> bool:
        c = self.config
        if self._consecutive >= c.consecutive_failures:
            return True
        requests = sum(b[1] for b in self._window)
        if requests < c.min_requests:
            return False
        return sum(b[2] for b in self._window) / requests >= c.error_rate

    def _open(self, now: float) -> None:
        self._state, self._opened_at = OPEN, now
        self._probe_granted = False
        if self.on_change is not None:
            self.on_change(OPEN, self.config.cooldown_s)

    def _close(self) -> None:
        self._state, self._consecutive = CLOSED, 0
        self._window.clear()
        self._probe_granted = False
        if self.on_change is not None:
            self.on_change(CLOSED, 0.0)

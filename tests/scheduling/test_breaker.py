"""The circuit breaker's every transition, on an injected clock (no sleeping).

closed -> open (failures in a row, or error rate), open -> half_open after the
cooldown, one probe only, probe ok -> closed, probe failed -> open, a probe
left without a verdict (neutral, raised, cancelled) -> released, and rests.
"""

from __future__ import annotations

import asyncio

import pytest

from core.escalation_config import BreakerConfig
from scheduling.breaker import CLOSED, HALF_OPEN, OPEN, RESTING, STATE_CODE, Breaker


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def breaker(clock: Clock, **config: object) -> Breaker:
    settings = {"consecutive_failures": 3, "cooldown_s": 10, "min_requests": 4,
                "error_rate": 0.5, "window_s": 30, **config}
    return Breaker(BreakerConfig.model_validate(settings), clock=clock)


def fail(b: Breaker, times: int = 1) -> None:
    for _ in range(times):
        with b.attempt() as trial:
            assert trial.allowed
            trial.failed()


def succeed(b: Breaker, times: int = 1) -> None:
    for _ in range(times):
        with b.attempt() as trial:
            assert trial.allowed
            trial.ok()


def opened(clock: Clock) -> Breaker:
    b = breaker(clock)
    fail(b, 3)
    assert b.state == OPEN
    return b


def test_consecutive_failures_open_it_and_a_success_resets_the_count() -> None:
    clock = Clock()
    b = breaker(clock, min_requests=100)
    fail(b, 2)
    succeed(b)
    fail(b, 2)
    assert b.state == CLOSED and b.available()
    fail(b)
    assert b.state == OPEN
    assert not b.available() and not b.attempt().allowed


def test_the_error_rate_opens_it_once_min_requests_are_in_the_window() -> None:
    clock = Clock()
    b = breaker(clock, consecutive_failures=100, min_requests=4, error_rate=0.5)
    fail(b)
    succeed(b)
    fail(b)                  # 2 of 3: over the rate, but under min_requests
    assert b.state == CLOSED
    succeed(b)               # 2 of 4 = 0.5: at the rate, with min_requests
    assert b.state == CLOSED
    fail(b)                  # 3 of 5
    assert b.state == OPEN


def test_outcomes_older_than_the_window_no_longer_count() -> None:
    clock = Clock()
    b = breaker(clock, consecutive_failures=100, min_requests=4, window_s=30)
    fail(b, 3)
    clock.now += 31
    succeed(b, 2)
    fail(b)                  # 1 of 3 in the window; counting the old three, 4 of 6 would trip
    assert b.state == CLOSED
    fail(b)                  # 2 of 4, within the window: trips
    assert b.state == OPEN


def test_the_cooldown_leads_to_half_open_with_one_probe_only() -> None:
    clock = Clock()
    b = opened(clock)
    clock.now += 9.9
    assert not b.available() and not b.attempt().allowed
    clock.now += 0.1
    assert b.available() and b.state == OPEN
    with b.attempt() as probe:
        assert probe.allowed and probe.probe and b.state == HALF_OPEN
        assert not b.available()
        assert not b.attempt().allowed       # a second request may not probe too
        probe.ok()


def test_a_successful_probe_closes_it_and_forgets_the_failures() -> None:
    clock = Clock()
    b = opened(clock)
    clock.now += 10
    succeed(b)
    assert b.state == CLOSED and b.available()
    fail(b, 2)                               # the three old failures are gone
    assert b.state == CLOSED


def test_a_failed_probe_reopens_it_for_a_fresh_cooldown() -> None:
    clock = Clock()
    b = opened(clock)
    clock.now += 10
    fail(b)
    assert b.state == OPEN and not b.available()
    clock.now += 9.9
    assert not b.available()
    clock.now += 0.1
    assert b.available()


def test_a_probe_left_without_a_verdict_is_released() -> None:
    clock = Clock()
    b = opened(clock)
    clock.now += 10
    with b.attempt() as probe:               # an upstream 400, a queue refusal, ...
        assert probe.allowed and not b.available()
    assert b.state == HALF_OPEN and b.available()
    succeed(b)                               # the next request probes, and decides
    assert b.state == CLOSED


def test_a_probe_that_raises_is_released() -> None:
    clock = Clock()
    b = opened(clock)
    clock.now += 10
    with pytest.raises(RuntimeError), b.attempt() as probe:
        assert probe.allowed
        raise RuntimeError("a bug, or a total_s timeout")
    assert b.available()
    with b.attempt() as again:
        assert again.allowed and again.probe
        again.failed()
    assert b.state == OPEN


def test_a_cancelled_probe_is_released() -> None:
    clock = Clock()
    b = opened(clock)
    clock.now += 10
    entered = asyncio.Event()

    async def call_upstream() -> None:
        with b.attempt() as probe:
            assert probe.allowed
            entered.set()
            await asyncio.sleep(3600)        # the client leaves meanwhile
            probe.ok()

    async def main() -> None:
        task = asyncio.create_task(call_upstream())
        await entered.wait()
        assert not b.available()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert b.state == HALF_OPEN and b.available()


def test_a_verdict_after_release_or_a_second_verdict_changes_nothing() -> None:
    clock = Clock()
    b = opened(clock)
    clock.now += 10
    with b.attempt() as probe:
        probe.ok()
        probe.failed()
    assert b.state == CLOSED
    fail(b, 3)
    clock.now += 10
    with b.attempt() as probe:
        probe.release()
    probe.failed()
    assert b.state == HALF_OPEN and b.available()


def test_a_call_started_before_the_probe_does_not_decide_it() -> None:
    clock = Clock()
    b = breaker(clock)
    with b.attempt() as slow:                # in flight while the breaker opens
        fail(b, 3)
        clock.now += 10
        with b.attempt() as probe:
            assert probe.probe
            slow.ok()                        # the old call's answer: not the probe's verdict
            assert b.state == HALF_OPEN and not b.available()
            probe.failed()
    assert b.state == OPEN


def test_a_rest_takes_the_model_out_and_reads_resting() -> None:
    clock = Clock()
    b = breaker(clock)
    with b.attempt() as trial:
        trial.rest(7)
    assert b.state == RESTING and STATE_CODE[RESTING] == 3
    assert not b.available() and not b.attempt().allowed
    b.rest_until(clock.now + 2)              # a shorter rest never cuts a longer one
    clock.now += 6.9
    assert b.state == RESTING
    clock.now += 0.1
    assert b.state == CLOSED and b.available()


def test_a_rest_is_capped_at_max_rest_s() -> None:
    clock = Clock()
    b = breaker(clock, max_rest_s=300)
    b.rest_until(clock.now + 99_999_999)
    clock.now += 299.9
    assert b.state == RESTING
    clock.now += 0.1
    assert b.state == CLOSED and b.available()
    b.rest_until(float("inf"))
    clock.now += 300
    assert b.available()


def test_a_probe_that_is_told_to_rest_is_released_and_rests() -> None:
    clock = Clock()
    b = opened(clock)
    clock.now += 10
    with b.attempt() as probe:
        probe.rest(5)                        # an upstream 429: no verdict on its health
    assert b.state == RESTING and not b.available()
    clock.now += 5
    assert b.state == HALF_OPEN and b.available()
    succeed(b)
    assert b.state == CLOSED


def test_a_disabled_breaker_never_opens_but_still_rests() -> None:
    clock = Clock()
    b = breaker(clock, enabled=False)
    fail(b, 50)
    assert b.state == CLOSED and b.available()
    with b.attempt() as trial:
        trial.rest(3)
    assert not b.attempt().allowed
    clock.now += 3
    assert b.attempt().allowed


def test_closed_calls_share_one_trial_and_only_a_probe_is_new() -> None:
    clock = Clock()
    b = breaker(clock)
    assert b.attempt() is b.attempt()        # nothing allocated per request while closed
    fail(b, 3)
    clock.now += 10
    first = b.attempt()
    first.release()
    assert b.attempt() is not first

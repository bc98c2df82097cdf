"""Breakers and rests shared by the gateway replicas, through Redis.

    health = FleetHealth(redis.client, "rg", replica_id, breakers)
    state.spawn(health.run())        # publishes this replica's verdicts, takes the others'

When a model's breaker opens on one replica, or an upstream's 429 rests it,
the others stop sending to it too, instead of each finding out with failed
requests of its own. Nothing crosses Redis per request: a breaker reports a
change through ``Breaker.on_change`` (a list append), and this loop, every
``every_s`` (0.25 s), writes the changes and reads the others' in one
pipelined round trip. So a model failing on replica A leaves replica B's
routing within about two polls.

One hash, ``{prefix}:health``, holds the fleet's verdicts:

* ``open:<model>`` = ``<until>|<replica>``: that replica's breaker opened;
  the cooldown ends at ``until`` (epoch seconds). Every replica holds the
  model out until then. After it, one replica wins the probe
  (``SET {prefix}:health:probe:<model> NX PX``) and sends the one probe
  request; the others keep holding. The probe's verdict is published like
  any other: closed (the field goes, and every replica closes) or open again.
* ``rest:<model>`` = ``<until>|<replica>``: an upstream asked for a rest.

A replica that cannot reach Redis stops coordinating probes (its breakers
probe by their own cooldown, as a lone replica does) and keeps what it last
read until the holds run out. Clocks of different hosts are compared, so
they must agree to well within a second (NTP does).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from core.aio import raise_if_cancelled
from scheduling.breaker import CLOSED, OPEN, RESTING, Breaker

log = logging.getLogger("routegate.scheduler")

EVERY_S = 0.25
# The probe winner has this long to probe before another replica may claim it.
PROBE_LEASE_S = 10.0
# A loser re-checks the probe's outcome at least this often.
HOLD_S = 1.0
# After this long without Redis, probes are no longer coordinated.
LOST_AFTER_S = 3.0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class FleetHealth:
    def __init__(self, redis: Any, prefix: str, replica_id: str,
                 breakers: Mapping[str, Breaker]) -> None:
        self.redis = redis
        self.key = f"{prefix}:health"
        self.prefix = prefix
        self.replica_id = replica_id
        self.breakers = breakers
        # The latest unpublished change per (model, "open" or "rest"): bounded
        # by the fleet's size however long Redis is away.
        self._pending: dict[tuple[str, str], tuple[str, float, float]] = {}
        self._shared: set[str] = set()   # models another replica's open verdict holds here
        self._last_ok = 0.0
        for name, breaker in breakers.items():
            breaker.on_change = self._reporter(name)
            breaker.coordinated = True

    def _reporter(self, model: str) -> Any:
        def report(state: str, seconds: float) -> None:
            kind = "rest" if state == RESTING else "open"
            self._pending[model, kind] = (state, seconds, time.time())
        return report

    def probe_key(self, model: str) -> str:
        return f"{self.prefix}:health:probe:{model}"

    async def sync(self) -> None:
        """Publish this replica's changes, then take the fleet's verdicts."""
        pending, self._pending = self._pending, {}
        try:
            pipe = self.redis.pipeline(transaction=False)
            for (model, _), (state, seconds, at) in pending.items():
                if state == OPEN:
                    pipe.hset(self.key, f"open:{model}", f"{at + seconds}|{self.replica_id}")
                elif state == RESTING:
                    pipe.hset(self.key, f"rest:{model}", f"{at + seconds}|{self.replica_id}")
                elif state == CLOSED:
                    pipe.hdel(self.key, f"open:{model}")
                    pipe.delete(self.probe_key(model))
            pipe.hgetall(self.key)
            verdicts = (await pipe.execute())[-1]
        except BaseException:
            self._pending = {**pending, **self._pending}   # published next time
            raise
        self._last_ok = time.monotonic()
        await self._apply({_text(k): _text(v) for k, v in verdicts.items()})

    async def _apply(self, verdicts: dict[str, str]) -> None:
        now, mono = time.time(), time.monotonic()
        held: set[str] = set()
        stale: list[str] = []
        for field, value in verdicts.items():
            kind, _, model = field.partition(":")
            breaker = self.breakers.get(model)
            until_s, _, origin = value.partition("|")
            try:
                until = float(until_s)
            except ValueError:
                continue
            if breaker is None:
                continue
            if kind == "rest":
                if until <= now:
                    stale.append(field)
                else:
                    breaker.rest_until(mono + (until - now), shared=True)
            elif kind == "open":
                held.add(model)
                if until > now:
                    breaker.hold(mono + (until - now) + HOLD_S)
                elif await self._claim_probe(model):
                    breaker.grant_probe()
                else:
                    breaker.hold(mono + HOLD_S)
        for model in self._shared - held:   # the probe passed somewhere: closed everywhere
            self.breakers[model].close()
        self._shared = held
        if stale:
            await self.redis.hdel(self.key, *stale)

    async def _claim_probe(self, model: str) -> bool:
        key = self.probe_key(model)
        if await self.redis.set(key, self.replica_id, nx=True, px=int(PROBE_LEASE_S * 1000)):
            log.info("model %s: this replica probes it for the fleet", model)
            return True
        return _text(await self.redis.get(key) or b"") == self.replica_id

    def _coordinate(self, on: bool) -> None:
        for breaker in self.breakers.values():
            breaker.coordinated = on

    async def run(self, every_s: float = EVERY_S) -> None:
        failing = False
        while True:
            raise_if_cancelled()  # redis-py's wait_for may have swallowed a cancel
            try:
                await self.sync()
                if failing:
                    log.info("shared breakers: Redis reachable again")
                    self._coordinate(True)
                failing = False
            except Exception as exc:
                if not failing and time.monotonic() - self._last_ok > LOST_AFTER_S:
                    log.warning("shared breakers: Redis unreachable (%s); each replica's "
                                "breakers probe on their own until it is back",
                                type(exc).__name__)
                    self._coordinate(False)
                    failing = True
            await asyncio.sleep(every_s)

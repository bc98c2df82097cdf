"""Breakers and rests shared by replicas through a real Redis (scheduling/fleet_health.py)."""

from __future__ import annotations

import asyncio
import uuid

import redis.asyncio as aioredis

from core.escalation_config import BreakerConfig
from scheduling.breaker import Breaker
from scheduling.fleet_health import FleetHealth


def replicas(client: aioredis.Redis, prefix: str) -> tuple[FleetHealth, FleetHealth]:
    config = BreakerConfig(consecutive_failures=2, cooldown_s=0.5)
    return (FleetHealth(client, prefix, "a", {"m": Breaker(config)}),
            FleetHealth(client, prefix, "b", {"m": Breaker(config)}))


def test_a_rest_and_an_open_reach_the_other_replica_and_one_probes() -> None:
    async def body() -> None:
        client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
        a, b = replicas(client, f"rgtest-{uuid.uuid4().hex[:8]}")
        ba, bb = a.breakers["m"], b.breakers["m"]
        try:
            with ba.attempt() as trial:
                trial.rest(1.0)                 # an upstream's 429 on A
            await a.sync()
            await b.sync()
            assert bb.state == "resting" and not bb.available()
            await asyncio.sleep(1.1)
            await b.sync()
            assert bb.available()
            for _ in range(2):                  # two failures on A open it
                with ba.attempt() as trial:
                    trial.failed()
            assert ba.state == "open"
            await a.sync()
            await b.sync()
            assert bb.state == "open" and not bb.available()
            await asyncio.sleep(0.6)            # cooled down: a probe for one replica only
            await a.sync()
            await b.sync()
            assert [ba.available(), bb.available()] == [True, False]
            with ba.attempt() as probe:
                assert probe.probe
                probe.ok()
            await a.sync()
            await b.sync()
            assert ba.state == bb.state == "closed" and bb.available()
            assert await client.hlen(a.key) <= 1   # the spent rest may linger until swept
        finally:
            await client.delete(a.key, a.probe_key("m"))
            await client.aclose()

    asyncio.run(body())


def test_without_redis_a_replica_probes_on_its_own() -> None:
    async def body() -> None:
        client = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
        a, _ = replicas(client, "rgtest-unreachable")
        breaker = a.breakers["m"]
        a._last_ok = -100.0                      # long since it last reached Redis
        task = asyncio.create_task(a.run(every_s=0.05))
        try:
            for _ in range(2):
                with breaker.attempt() as trial:
                    trial.failed()
            await asyncio.sleep(0.7)             # past the cooldown, no fleet to ask
            assert not breaker.coordinated and breaker.available()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.aclose()

    asyncio.run(body())

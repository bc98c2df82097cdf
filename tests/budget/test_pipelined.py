"""The lean pipelined client the request path's scripts run on, against real Redis."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.exceptions import BusyLoadingError, RedisError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from budget.pipelined import PipelinedRedis, encode_command
from tests.budget.servers import RedisServer

SCRIPT = "return {KEYS[1], ARGV[1], redis.call('INCR', KEYS[1])}"


def test_encoding_is_resp() -> None:
    assert encode_command(("SET", "k", 12)) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n12\r\n"


def test_concurrent_calls_get_their_own_replies(tmp_path: Path) -> None:
    async def main(url: str) -> None:
        client = PipelinedRedis(url)
        replies = await asyncio.gather(*(client.execute("ECHO", f"m{i}") for i in range(500)))
        assert replies == [f"m{i}".encode() for i in range(500)]
        with pytest.raises(ResponseError):
            await client.execute("NOT-A-COMMAND")
        assert await client.execute("PING") == b"PONG"   # an error does not break the pairing
        await client.aclose()

    with RedisServer(tmp_path / "redis") as server:
        asyncio.run(main(server.url))


def test_script_reloads_after_flush_and_reconnects_after_restart(tmp_path: Path) -> None:
    async def main(server: RedisServer) -> None:
        client = PipelinedRedis(server.url)
        script = client.register_script(SCRIPT)
        assert await script(keys=["k"], args=["a"]) == [b"k", b"a", 1]
        await client.execute("SCRIPT", "FLUSH")              # Redis forgot the script
        assert await script(keys=["k"], args=["b"]) == [b"k", b"b", 2]
        server.kill()
        with pytest.raises(RedisConnectionError):
            await script(keys=["k"], args=["c"])
        server.start()
        assert (await script(keys=["k"], args=["d"]))[1] == b"d"   # a fresh connection
        await client.aclose()

    with RedisServer(tmp_path / "redis") as server:
        asyncio.run(main(server))


def test_a_call_redis_never_answers_times_out_and_the_next_reconnects(tmp_path: Path) -> None:
    """One timer per connection bounds every call: a stalled Redis fails the calls
    in flight with TimeoutError after ``call_timeout_s``, never hangs them."""
    async def main(server: RedisServer) -> None:
        client = PipelinedRedis(server.url, call_timeout_s=0.3)
        assert await client.execute("PING") == b"PONG"
        server.pause()
        loop = asyncio.get_running_loop()
        started = loop.time()
        results = await asyncio.gather(*(client.execute("PING") for _ in range(5)),
                                       return_exceptions=True)
        waited = loop.time() - started
        server.resume()
        assert all(isinstance(r, RedisTimeoutError) for r in results), results
        assert 0.25 <= waited < 2.0
        assert await client.execute("ECHO", "after") == b"after"   # a fresh connection
        await client.aclose()

    with RedisServer(tmp_path / "redis") as server:
        asyncio.run(main(server))


def test_a_restarted_redis_still_loading_is_an_outage_not_an_error(tmp_path: Path) -> None:
    """While a restarted Redis loads its AOF it answers ``-LOADING``. That must
    surface as redis-py's BusyLoadingError, a ConnectionError the budget rides
    out by its fail policy; as a plain ResponseError it was a 500 to the client."""
    import threading

    import redis

    async def during_load(server: RedisServer, loading: threading.Thread) -> list[object]:
        client = PipelinedRedis(server.url)
        seen: list[object] = []
        while loading.is_alive():
            try:
                seen.append(await client.execute("GET", "k1"))
            except RedisError as exc:
                seen.append(exc)
            await asyncio.sleep(0.02)
        seen.append(await client.execute("GET", "k1"))
        await client.aclose()
        return seen

    # key-load-delay: Redis's own test knob, microseconds per key loaded.
    with RedisServer(tmp_path / "redis", "--key-load-delay", "100") as server:
        with redis.Redis(port=server.port) as sync:
            pipe = sync.pipeline(transaction=False)
            for i in range(20_000):
                pipe.set(f"k{i}", i)
            pipe.execute()
        server.kill()
        loading = threading.Thread(target=server.start)   # returns once it answers PING
        loading.start()
        seen = asyncio.run(during_load(server, loading))
        loading.join()
    busy = [e for e in seen if isinstance(e, BusyLoadingError)]
    assert busy, seen                                   # the load was long enough to see
    assert all(isinstance(e, RedisConnectionError) for e in seen if isinstance(e, Exception))
    assert seen[-1] == b"1"

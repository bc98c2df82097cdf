"""Prefix affinity with bounded load: the ring alone, then two simulator
processes as the replicas of one model."""

from __future__ import annotations

import asyncio
import contextlib
import math

import httpx

from backends.affinity import PrefixAffinity, prefix_key
from backends.base import UpstreamCall
from backends.openai_compat import OpenAICompatBackend
from core.config import ModelConfig, Price
from tests.support import run_simulator

SYSTEM = "You are a support agent for a company that sells kettles. " * 10   # ~600 chars
LONG = SYSTEM * 4     # past the 2,048 characters hashed: only the system prompt counts


def convo(user: str, system: str = SYSTEM) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def test_the_key_is_the_prompt_head_and_ignores_what_follows() -> None:
    a = prefix_key(convo("first question") + [{"role": "assistant", "content": "x" * 5000}], 500)
    b = prefix_key(convo("another question"), 500)
    assert a == b and len(a) == 500
    assert prefix_key(convo("q", system="short"), 500) != a


def test_same_prefix_same_replica_and_distinct_prefixes_spread() -> None:
    ring = PrefixAffinity(4)
    homes = set()
    for _ in range(20):
        i = ring.pick(convo("what is the warranty?"))
        ring.release(i)
        homes.add(i)
    assert len(homes) == 1
    spread = set()
    for n in range(64):
        i = ring.pick(convo("q", system=f"tenant {n}: " + SYSTEM))
        ring.release(i)
        spread.add(i)
    assert spread == {0, 1, 2, 3}


def test_no_replica_goes_over_the_load_bound_and_the_overflow_has_one_place() -> None:
    ring = PrefixAffinity(3, load_factor=1.25)
    placed = []
    for n in range(30):                      # one hot prefix, nothing released
        placed.append(ring.pick(convo("hot")))
        bound = math.ceil(1.25 * (n + 1) / 3)
        assert max(ring.in_flight) <= bound
    assert placed[0] == ring.home(prefix_key(convo("hot")))
    assert len(set(placed)) == 3             # spilled when home was full ...
    again = PrefixAffinity(3, load_factor=1.25)
    assert [again.pick(convo("hot")) for _ in range(30)] == placed   # ... always the same way
    for i in placed:
        ring.release(i)
    assert ring.in_flight == [0, 0, 0]


def test_short_prompts_go_to_the_least_loaded_replica() -> None:
    ring = PrefixAffinity(2)
    first = ring.pick(convo("hi", system="be brief"))
    second = ring.pick(convo("hi", system="be brief"))
    assert {first, second} == {0, 1}


def test_one_replica_needs_no_hashing() -> None:
    ring = PrefixAffinity(1)
    assert ring.pick(convo("anything")) == 0 and ring.in_flight == [1]


def sim_requests(url: str) -> int:
    return int(httpx.get(url.removesuffix("/v1") + "/sim/stats").json()["default"]["requests"])


def test_two_simulator_replicas_share_prefixes_stickily_within_the_bound() -> None:
    flags = ("--tpot-ms", "20", "--prefill", "200000", "--output-mean", "20")
    with run_simulator(*flags) as a, run_simulator(*flags) as b:
        model = ModelConfig(name="m", backend="openai_compat", base_url=[a, b],
                            upstream_model="default",
                            price=Price(input_per_mtok=1, output_per_mtok=1))

        def call(n: int, messages: list[dict[str, str]], stream: bool = True) -> UpstreamCall:
            return UpstreamCall(f"r{n}", {"model": "default", "messages": messages,
                                          "max_tokens": 20, "stream": stream}, 200)

        async def scenario() -> tuple[list[int], list[int], list[int]]:
            backend = OpenAICompatBackend(model)
            try:
                sticky = [0, 0]
                for n in range(6):                       # one after another: all at home
                    before = [sim_requests(a), sim_requests(b)]
                    await backend.complete(call(n, convo(f"q{n}", LONG), stream=False))
                    after = [sim_requests(a), sim_requests(b)]
                    sticky = [s + (x - y) for s, x, y in zip(sticky, after, before, strict=True)]
                held = [await backend.stream(call(10 + n, convo("hot", LONG))) for n in range(6)]
                peak = list(backend.affinity.in_flight)
                for stream in held:
                    await stream.aclose()
                return sticky, peak, list(backend.affinity.in_flight)
            finally:
                await backend.aclose()

        sticky, peak, after = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert sorted(sticky) == [0, 6]                   # the same replica every time
    assert min(peak) >= 1 and max(peak) <= math.ceil(1.25 * 6 / 2)   # spilled, bounded
    assert after == [0, 0]


def test_a_replica_that_is_down_is_passed_over_and_comes_back() -> None:
    ring = PrefixAffinity(3)
    home = ring.pick(convo("q", LONG))
    ring.release(home)
    ring.down(home)
    elsewhere = {ring.pick(convo("q", LONG), preferred=home) for _ in range(6)}
    assert home not in elsewhere                 # neither its ring home nor its warm one
    ring.in_flight = [0, 0, 0]
    for i in range(3):
        ring.down(i)
    assert ring.pick(convo("q", LONG)) == home   # all down: a mark may be stale, try anyway
    ring.release(home)
    ring.down_until = [0.0] * 3                  # its time is up
    assert ring.pick(convo("q", LONG), preferred=home) == home


def test_a_dead_replica_costs_no_request_and_the_model_stays_up() -> None:
    """Two simulator processes serve one model; one is stopped. Every call, the ones
    that prefer it (a session warm there) and its ring's own, is answered by the other,
    streamed or not, and nothing stays counted in flight; the stopped one is marked down."""
    flags = ("--tpot-ms", "1", "--prefill", "200000", "--output-mean", "4")
    with run_simulator(*flags) as a, contextlib.ExitStack() as stack:
        b = stack.enter_context(run_simulator(*flags))
        model = ModelConfig(name="m", backend="openai_compat", base_url=[a, b],
                            upstream_model="default",
                            price=Price(input_per_mtok=1, output_per_mtok=1))
        stack.close()                                      # b is gone

        async def scenario() -> tuple[list[int | None], list[int], list[float]]:
            backend = OpenAICompatBackend(model)
            try:
                served = []
                for n in range(8):
                    call = UpstreamCall(f"r{n}", {"model": "default", "max_tokens": 4,
                                                  "messages": convo(f"q{n}", f"{n} " + LONG),
                                                  "stream": n % 2 == 1}, 200, replica=1)
                    if n % 2:
                        stream = await backend.stream(call)
                        async for _ in stream:
                            pass
                        await stream.aclose()
                    else:
                        await backend.complete(call)
                    served.append(call.replica)
                return served, list(backend.affinity.in_flight), backend.affinity.down_until
            finally:
                await backend.aclose()

        served, in_flight, down = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert served == [0] * 8
    assert in_flight == [0, 0]
    assert down[1] > down[0] == 0.0


ANSWER = (b'{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
          b'"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],'
          b'"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}')
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(ANSWER), ANSWER)


def test_a_request_a_replica_took_before_dying_is_not_sent_to_another() -> None:
    """Replica A answers a first request, reads the second on the same kept-alive
    connection and dies (connection reset, listener closed). The transport's keep-alive
    retry finds A refusing: the request may have been read, so it fails as the reset it
    was, and is not placed on replica B as one that reached nothing."""
    got: dict[str, int] = {"A": 0, "B": 0}

    async def read(reader: asyncio.StreamReader) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        size = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:"))
        await reader.readexactly(size)

    async def scenario() -> list[str]:
        servers: dict[str, asyncio.Server] = {}

        async def a(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                while True:
                    await read(reader)
                    got["A"] += 1
                    if got["A"] > 1:                     # read it, then the process died
                        servers["A"].close()
                        writer.transport.abort()
                        return
                    writer.write(OK)
                    await writer.drain()

        async def b(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                while True:
                    await read(reader)
                    got["B"] += 1
                    writer.write(OK)
                    await writer.drain()

        servers["A"] = await asyncio.start_server(a, "127.0.0.1", 0)
        servers["B"] = await asyncio.start_server(b, "127.0.0.1", 0)
        urls = [f"http://127.0.0.1:{servers[n].sockets[0].getsockname()[1]}/v1" for n in "AB"]
        backend = OpenAICompatBackend(ModelConfig(
            name="m", backend="openai_compat", base_url=urls, upstream_model="default",
            price=Price(input_per_mtok=1, output_per_mtok=1)))
        outcomes = []
        try:
            for n in range(2):
                call = UpstreamCall(f"r{n}", {"model": "default", "messages": convo(f"q{n}")},
                                    5, replica=0)
                try:
                    await backend.complete(call)
                    outcomes.append(f"answered by {call.replica}")
                except Exception as exc:
                    outcomes.append(type(exc).__name__)
            assert backend.affinity.in_flight == [0, 0]
        finally:
            await backend.aclose()
            servers["B"].close()
        return outcomes

    outcomes = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert outcomes[0] == "answered by 0" and outcomes[1] != "answered by 1"
    assert got == {"A": 2, "B": 0}


def test_a_replica_gone_off_the_network_is_passed_over_after_its_connect_timeout() -> None:
    """A replica that drops the handshake (its accept queue full here, as a host gone off
    the network drops it) is no answer within connect_s: the call goes to the other
    replica, and the silent one is marked down like one that refuses."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)
    port = silent.getsockname()[1]
    fillers = []
    for _ in range(3):                     # fill its accept queue: further SYNs are dropped
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)

    async def scenario() -> tuple[int | None, float]:
        async def ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    size = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                                if line.lower().startswith(b"content-length:"))
                    await reader.readexactly(size)
                    writer.write(OK)
                    await writer.drain()

        server = await asyncio.start_server(ok, "127.0.0.1", 0)
        live = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        backend = OpenAICompatBackend(ModelConfig(
            name="m", backend="openai_compat", base_url=[f"http://127.0.0.1:{port}/v1", live],
            upstream_model="default", timeouts={"connect_s": 0.5},  # type: ignore[arg-type]
            price=Price(input_per_mtok=1, output_per_mtok=1)))
        try:
            call = UpstreamCall("r", {"model": "default", "messages": convo("q")}, 5, replica=0)
            await backend.complete(call)
            assert backend.affinity.in_flight == [0, 0]
            return call.replica, backend.affinity.down_until[0]
        finally:
            await backend.aclose()
            server.close()

    try:
        replica, down = asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        for sock in (silent, *fillers):
            sock.close()
    assert replica == 1 and down > 0

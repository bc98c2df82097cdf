"""Do huge bodies stall everyone else? 7 MB of 200,000 blocks against other clients' latency.

    python -m loadtest.bench_big_bodies            # about 40 s

One gateway, two teams. A prober (team ``t``) sends small chat requests at a
steady rate and records their latency; meanwhile an attacker sends
``/v1/messages`` bodies of 200,000 small text blocks (7 MB), one after
another on ``--attackers`` connections, from a team past its hard limit
(refused before the body is read: ``gateway/pipeline/serve.py``) and then
from a team within it (refused by the shape bound, ``max_body_objects``, once
read). Printed: the prober's p50/p99 alone and under each attack, and how long
each refusal took. The target (money round 3): refusals in milliseconds, and
the prober's p99 under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import httpx
import orjson

from loadtest.report import print_rows
from loadtest.servers import OTHER_KEY, TEST_KEY, hashed, run_gateway, run_simulator

SMALL = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


def huge_body() -> bytes:
    blocks = [{"type": "text", "text": "ab"}] * 200_000
    return orjson.dumps({"model": "m", "max_tokens": 5,
                         "messages": [{"role": "user", "content": blocks}]})


async def send_raw(port: int, key: str, body: bytes) -> tuple[float, int]:
    """(seconds to the status line, status): the body is written while the answer is
    read, as a client does that the gateway refuses before reading it all."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (f"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: {key}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode()

    async def write() -> None:
        try:
            writer.write(head)
            for i in range(0, len(body), 1 << 16):
                writer.write(body[i:i + (1 << 16)])
                await writer.drain()
        except (ConnectionError, OSError):
            pass                                   # refused and closed: expected
    sending = asyncio.create_task(write())
    line = await reader.readline()
    took = time.perf_counter() - started
    sending.cancel()
    writer.close()
    return took, int(line.split()[1]) if line else 0


async def probe(url: str, seconds: float, rate: float) -> list[float]:
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=30) as client:
        async def one() -> None:
            started = time.perf_counter()
            r = await client.post(url + "/v1/chat/completions", json=SMALL,
                                  headers={"authorization": f"Bearer {TEST_KEY}"})
            r.raise_for_status()
            latencies.append(time.perf_counter() - started)
        tasks = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            tasks.append(asyncio.create_task(one()))
            await asyncio.sleep(1 / rate)
        await asyncio.gather(*tasks)
    return latencies


async def attack(port: int, key: str, seconds: float, attackers: int) -> list[tuple[float, int]]:
    body = huge_body()
    results: list[tuple[float, int]] = []
    end = time.monotonic() + seconds

    async def loop() -> None:
        while time.monotonic() < end:
            results.append(await send_raw(port, key, body))
    await asyncio.gather(*(loop() for _ in range(attackers)))
    return results


def ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.1f}"


async def scenario(url: str, seconds: float, rate: float, attackers: int) -> list[dict]:
    port = int(url.rsplit(":", 1)[1])
    rows = []
    await probe(url, 1.0, rate)                  # warm-up: connections, the first requests
    alone = await probe(url, seconds, rate)
    rows.append({"while": "nothing else", "prober p50 ms": ms(alone, 0.5),
                 "prober p99 ms": ms(alone, 0.99), "bodies": 0, "refusal": "-",
                 "refusal p50 ms": "-", "refusal max ms": "-"})
    for who, key in (("past its limit", OTHER_KEY), ("within its budget", TEST_KEY)):
        probed, attacked = await asyncio.gather(probe(url, seconds, rate),
                                                attack(port, key, seconds, attackers))
        took = [t for t, _ in attacked]
        statuses = sorted({s for _, s in attacked})
        rows.append({"while": f"7 MB bodies from a team {who}", "prober p50 ms": ms(probed, 0.5),
                     "prober p99 ms": ms(probed, 0.99), "bodies": len(attacked),
                     "refusal": "/".join(map(str, statuses)),
                     "refusal p50 ms": f"{1000 * statistics.median(took):.1f}",
                     "refusal max ms": f"{1000 * max(took):.1f}"})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rate", type=float, default=50, help="prober requests per second")
    parser.add_argument("--attackers", type=int, default=2)
    args = parser.parse_args(argv)
    with run_simulator("--tpot-ms", "1", "--prefill", "1000000", "--output-mean", "4") as sim:
        model = {"name": "m", "backend": "openai_compat", "base_url": sim,
                 "upstream_model": "default",
                 "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}
        config = {"models": [model],
                  "teams": [{"name": "t", "keys": [hashed(TEST_KEY)]},
                            {"name": "spent", "keys": [hashed(OTHER_KEY)],
                             "budget": {"daily_hard_usd": 0.0}}],
                  "redis_url": "redis://127.0.0.1:6379/0",
                  "budget": {"key_prefix": f"rgbench-{uuid.uuid4().hex[:8]}"},
                  "batch": {"enabled": False}, "max_body_bytes": 16 * 1024 * 1024,
                  "logging": {"requests": False}}
        with run_gateway(config) as gw:
            rows = asyncio.run(scenario(gw.url, args.seconds, args.rate, args.attackers))
    print_rows(rows)


if __name__ == "__main__":
    main()

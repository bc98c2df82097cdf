"""A lean closed-loop HTTP load generator, for machines without ``wrk``.

    python -m loadtest.loadgen --url http://127.0.0.1:9200/v1/chat/completions \\
        --body '{"model": "stub", "messages": []}' --header 'authorization: Bearer k' \\
        --concurrency 32 --duration 5

``concurrency`` keep-alive connections each send one POST, read the whole
answer, and send the next, until ``duration`` seconds have passed. Prints one
JSON line in the same shape as ``bench_proxy``'s wrk script: requests,
duration, p50/p99 latency in microseconds, error counts. Run it in its own
process, so that it never shares an event loop with the server it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiohttp


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


async def worker(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str],
                 deadline: float, latencies: list[float], errors: dict[str, int]) -> None:
    clock = time.perf_counter
    while clock() < deadline:
        started = clock()
        try:
            async with session.post(url, data=body, headers=headers) as resp:
                await resp.read()
                if resp.status >= 400:
                    errors["status"] += 1
        except (aiohttp.ClientError, OSError):
            errors["read"] += 1
            continue
        latencies.append(clock() - started)


async def run(url: str, body: bytes, headers: dict[str, str], concurrency: int,
              duration: float) -> dict[str, int]:
    latencies: list[float] = []
    errors = {"status": 0, "read": 0}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=30)) as session:
        started = time.perf_counter()
        deadline = started + duration
        await asyncio.gather(*(worker(session, url, body, headers, deadline, latencies, errors)
                               for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {"requests": len(latencies), "duration_us": int(elapsed * 1e6),
            "p50_us": int(percentile(latencies, 50) * 1e6),
            "p99_us": int(percentile(latencies, 99) * 1e6),
            "errors_status": errors["status"], "errors_read": errors["read"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="closed-loop HTTP POST load generator")
    parser.add_argument("--url", required=True)
    parser.add_argument("--body", required=True)
    parser.add_argument("--header", action="append", default=[], help="'name: value'")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args(argv)
    headers = {"content-type": "application/json"}
    for line in args.header:
        name, _, value = line.partition(":")
        headers[name.strip()] = value.strip()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    result = asyncio.run(run(args.url, args.body.encode(), headers, args.concurrency,
                             args.duration))
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""What shadow answers cost the client: latency with half the requests shadowed, and without.

    python -m loadtest.bench_shadow                       # 300 requests a run, concurrency 8
    python -m loadtest.bench_shadow --requests 200 --rounds 3

One fleet on the in-process simulator: ``small`` answers fast (2 ms a token),
``large``, the shadow model, slowly (25 ms a token, so a shadow on the
client's path would add a few hundred ms to every answer), and ``judgebot``
(the standalone simulator's pairwise judge) grades free-form pairs. Half the
requests ask for JSON (compared exactly), half are free-form (judged twice,
positions swapped); half of each are streamed.

Each round runs the same workload on two fresh gateways, ``off`` (no
shadow) then ``on`` (``shadow: {rate: 0.5, model: large, judge: judgebot}``,
the most it allows), so the only difference is the shadow path.
It prints, per run: client end-to-end p50 / p95 / p99, streams' TTFT p50 /
p95, the shadows compared and skipped (``routegate_shadows_total``), and the
shadow's and judge's spend from the gateway's books against the bound
``rate`` x served spend x (shadow price / served price).

The gateway and the simulator share this machine's cores with the client, so
the shadows' own work (the slow model's decoding is simulated, but their
relay, comparison and billing are real) shows up in ``on`` as contention, not
as waiting: the client's answer never waits for its shadow.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtest.report import print_rows
from loadtest.servers import TEST_KEY, base_config, run_gateway, run_simulator, sim_model

PRICES = {"small": 0.1, "large": 5.0, "judgebot": 3.0}
RATE = 0.5                  # the most `shadow.rate` allows


def fleet(sim_url: str, shadow: bool) -> dict:
    config = base_config(sim_url, routing={"auto_policy": "cheapest"})
    config["models"] = [
        sim_model("small", 0.5, PRICES["small"], tpot_ms=2, output_tokens_mean=24),
        sim_model("large", 0.9, PRICES["large"], tpot_ms=25, output_tokens_mean=24),
        {"name": "judgebot", "backend": "openai_compat", "base_url": sim_url,
         "upstream_model": "judge", "ability": 0.3,
         "price": {"input_per_mtok": PRICES["judgebot"], "output_per_mtok": 2 * PRICES["judgebot"]}},
    ]
    team = config["teams"][0]
    team["allowed_models"] = ["small", "large", "judgebot"]
    team.pop("quality", None)
    if shadow:
        team["shadow"] = {"rate": RATE, "model": "large", "judge": "judgebot"}
    config["teams"] = [team]
    config["budget"] = {"key_prefix": f"rgbench-shadow-{uuid.uuid4().hex[:8]}"}
    return config


def workload(n: int) -> list[dict[str, Any]]:
    bodies = []
    for i in range(n):
        body: dict[str, Any] = {"model": "auto", "max_tokens": 200, "stream": i % 4 >= 2,
                                "messages": [{"role": "user",
                                              "content": f"Tell me about harbour number {i}."}]}
        if i % 2:
            body["response_format"] = {"type": "json_object"}
            body["messages"][0]["content"] += " As JSON."
        bodies.append(body)
    return bodies


@dataclass
class Result:
    ok: bool
    latency_s: float
    ttft_s: float | None


async def one(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Result:
    started = time.perf_counter()
    ttft = None
    async with session.post(url, json=body) as r:
        if body["stream"]:
            async for raw in r.content:
                if ttft is None and raw.startswith(b"data: {"):
                    ttft = time.perf_counter() - started
        else:
            await r.read()
    return Result(r.status == 200, time.perf_counter() - started, ttft)


async def drive(url: str, bodies: list[dict[str, Any]], concurrency: int) -> list[Result]:
    gate = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(headers={"authorization": f"Bearer {TEST_KEY}"},
                                     timeout=timeout) as session:
        async def bounded(body: dict[str, Any]) -> Result:
            async with gate:
                return await one(session, url, body)
        return await asyncio.gather(*(bounded(b) for b in bodies))


def shadow_counts(gw_url: str) -> dict[str, int]:
    text = httpx.get(gw_url + "/metrics", timeout=10).text
    counts = {}
    for result, value in re.findall(r'^routegate_shadows_total\{result="(\w+)"\} (\S+)$', text,
                                    re.M):
        counts[result] = int(float(value))
    return counts


def ledger(gw_url: str) -> dict[str, int]:
    usage = httpx.get(gw_url + "/v1/usage", headers={"authorization": f"Bearer {TEST_KEY}"},
                      timeout=10).json()
    return {row["model"]: row["cost_nanousd"] for row in usage["ledger"]}


def settle(gw_url: str, shadow: bool, seconds: float = 30.0) -> dict[str, int]:
    """The shadow counts once no shadow is left running (or ``seconds`` passed)."""
    end = time.monotonic() + seconds
    last: dict[str, int] = {}
    while True:
        counts = shadow_counts(gw_url)
        if not shadow or (counts == last and counts) or time.monotonic() > end:
            return counts
        last = counts
        time.sleep(1.0)


def run(sim_url: str, shadow: bool, args: argparse.Namespace) -> dict[str, Any]:
    with run_gateway(fleet(sim_url, shadow)) as gw:
        url = gw.base_url + "/chat/completions"
        asyncio.run(drive(url, workload(16), 4))                  # warm-up, not counted
        started = time.perf_counter()
        results = asyncio.run(drive(url, workload(args.requests), args.concurrency))
        wall = time.perf_counter() - started
        counts = settle(gw.url, shadow)
        books = ledger(gw.url)
    return row("on" if shadow else "off", results, wall, counts, books)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def row(name: str, results: list[Result], wall: float, counts: dict[str, int],
        books: dict[str, int]) -> dict[str, Any]:
    ms = [x.latency_s * 1000 for x in results]
    ttft = [x.ttft_s * 1000 for x in results if x.ttft_s is not None]
    served = books.get("small", 0)
    bound = RATE * served * PRICES["large"] / PRICES["small"]
    return {"run": name, "ok": sum(x.ok for x in results), "req_per_s": round(len(results) / wall, 1),
            "e2e_p50_ms": round(statistics.median(ms), 1), "e2e_p95_ms": round(pct(ms, 0.95), 1),
            "e2e_p99_ms": round(pct(ms, 0.99), 1),
            "ttft_p50_ms": round(statistics.median(ttft), 1) if ttft else None,
            "ttft_p95_ms": round(pct(ttft, 0.95), 1) if ttft else None,
            "shadows": counts.get("compared", 0), "skipped": counts.get("skipped", 0),
            "cut": counts.get("cut", 0), "failed": counts.get("failed", 0),
            "shadow_nanousd": books.get("large", 0), "judge_nanousd": books.get("judgebot", 0),
            "bound_nanousd": round(bound) if name == "on" else None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    rows = []
    with run_simulator("--tpot-ms", "2", "--prefill", "200000") as sim_url:
        for _ in range(args.rounds):
            rows += [run(sim_url, False, args), run(sim_url, True, args)]
    print_rows(rows)


if __name__ == "__main__":
    main()

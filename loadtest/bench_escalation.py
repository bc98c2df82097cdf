"""Escalation under load: a cheap model that is often wrong, made reliable.

    python -m loadtest.bench_escalation                 # 400 requests per run, concurrency 16
    python -m loadtest.bench_escalation --requests 200 --concurrency 8

The fleet (in-process simulator, so the gateway's own work is what is measured):
``small`` returns invalid JSON 30% of the time and invalid tool arguments 20% of
the time; ``medium`` and ``large`` never do. Every request asks for structured
output: half ``response_format: json_object``, half a required tool call with a
JSON-schema'd argument object; half of each streamed.

Four runs on the same workload, each on a fresh gateway with its own budget
books:

- ``cascade``: ``model: auto`` (cheapest first), escalation on, streams held
  (``stream_mode: buffer``);
- ``passthrough``: the same, structured streams passed through at once (no
  escalation after the first byte): the TTFT that buffering costs;
- ``small``: always the small model, no escalation;
- ``large``: always the large model.

Every answer is checked on the client with the gateway's own validators. It
prints, per run: valid answers, escalation rate, cost per *completed* (valid)
request from the gateway's books (every attempt included), p50/p95 end-to-end
latency, and p50 TTFT of the streams.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtest.report import print_rows
from loadtest.servers import TEST_KEY, base_config, run_gateway, run_simulator
from policies.validators import check_answer

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "days": {"type": "integer"}},
          "required": ["city", "days"]}
TOOLS = [{"type": "function", "function": {"name": "forecast", "parameters": SCHEMA}}]
PRICES = {"small": 0.1, "medium": 1.0, "large": 5.0}


def fleet(sim_url: str, runs: str) -> dict:
    def model(name: str, ability: float, **faults: float) -> dict:
        price = PRICES[name]
        return {"name": name, "backend": "simulated", "ability": ability,
                "price": {"input_per_mtok": price, "output_per_mtok": price * 2},
                "simulate": {"tpot_ms": 5, "prefill_tokens_per_s": 20000, "max_batch": 64,
                             "output_tokens_mean": 40, **faults}}

    config = base_config(sim_url, routing={"auto_policy": "cheapest"})
    config["models"] = [model("small", 0.5, invalid_json_rate=0.3, invalid_tool_args_rate=0.2),
                        model("medium", 0.7), model("large", 0.9)]
    config["teams"] = config["teams"][:1]
    config["teams"][0]["allowed_models"] = ["small", "medium", "large"]
    config["escalation"] = {"stream_mode": "passthrough" if runs == "passthrough" else "buffer",
                            "enabled": runs in ("cascade", "passthrough")}
    config["budget"] = {"key_prefix": f"rgbench-esc-{uuid.uuid4().hex[:8]}"}
    return config


def workload(n: int, model: str) -> list[dict[str, Any]]:
    bodies = []
    for i in range(n):
        body: dict[str, Any] = {"model": model, "max_tokens": 200, "stream": i % 4 >= 2,
                                "messages": [{"role": "user",
                                              "content": f"Forecast for city number {i}."}]}
        if i % 2:
            body["tools"], body["tool_choice"] = TOOLS, "required"
        else:
            body["response_format"] = {"type": "json_object"}
        bodies.append(body)
    return bodies


@dataclass
class Result:
    valid: bool
    escalated: bool
    latency_s: float
    ttft_s: float | None


@dataclass
class Run:
    name: str
    results: list[Result] = field(default_factory=list)
    cost_usd: float = 0.0


def _merge_stream(lines: list[dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    content, args, name, finish = [], [], None, None
    for chunk in lines:
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            for call in delta.get("tool_calls") or ():
                fn = call.get("function") or {}
                name = name or fn.get("name")
                args.append(fn.get("arguments") or "")
            finish = choice.get("finish_reason") or finish
    message: dict[str, Any] = {"content": "".join(content) or None}
    if name:
        message["tool_calls"] = [{"function": {"name": name, "arguments": "".join(args)}}]
    return message, finish


async def one(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Result:
    started = time.perf_counter()
    ttft = None
    async with session.post(url, json=body) as r:
        escalated = "x-routegate-attempts" in r.headers
        if not body["stream"]:
            data = await r.json()
            choice = (data.get("choices") or [{}])[0]
            message, finish = choice.get("message") or {}, choice.get("finish_reason")
        else:
            chunks = []
            async for raw in r.content:
                line = raw.strip()
                if not line.startswith(b"data: {"):
                    continue
                ttft = ttft or time.perf_counter() - started
                chunks.append(json.loads(line[6:]))
            message, finish = _merge_stream(chunks)
    ok = r.status == 200 and check_answer(body, message, finish) is None
    return Result(ok, escalated, time.perf_counter() - started, ttft)


async def drive(url: str, bodies: list[dict[str, Any]], concurrency: int) -> list[Result]:
    gate = asyncio.Semaphore(concurrency)
    headers = {"authorization": f"Bearer {TEST_KEY}"}
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
        async def bounded(body: dict[str, Any]) -> Result:
            async with gate:
                return await one(session, url, body)
        return await asyncio.gather(*(bounded(b) for b in bodies))


def run(sim_url: str, name: str, args: argparse.Namespace) -> Run:
    model = {"cascade": "auto", "passthrough": "auto"}.get(name, name)
    with run_gateway(fleet(sim_url, name)) as gw:
        results = asyncio.run(drive(gw.base_url + "/chat/completions",
                                    workload(args.requests, model), args.concurrency))
        time.sleep(0.3)     # settles are batched after the response
        usage = httpx.get(gw.base_url + "/usage",
                          headers={"authorization": f"Bearer {TEST_KEY}"}).json()
    return Run(name, results, usage["spent_today_usd"])


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def report(r: Run) -> dict[str, Any]:
    valid = sum(x.valid for x in r.results)
    latencies = [x.latency_s for x in r.results]
    ttfts = [x.ttft_s for x in r.results if x.ttft_s is not None]
    return {"run": r.name, "requests": len(r.results), "valid": valid,
            "valid_share": round(valid / len(r.results), 4),
            "escalation_rate": round(sum(x.escalated for x in r.results) / len(r.results), 4),
            "cost_usd": round(r.cost_usd, 8),
            "cost_per_completed_usd": round(r.cost_usd / valid, 10) if valid else None,
            "latency_p50_ms": round(statistics.median(latencies) * 1000, 1),
            "latency_p95_ms": round(pct(latencies, 0.95) * 1000, 1),
            "stream_ttft_p50_ms": round(statistics.median(ttfts) * 1000, 1) if ttfts else None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--runs", default="cascade,passthrough,small,large")
    args = parser.parse_args(argv)
    with run_simulator("--tpot-ms", "2", "--prefill", "200000") as sim_url:
        rows = [report(run(sim_url, name, args)) for name in args.runs.split(",")]
    print_rows(rows)


if __name__ == "__main__":
    main()

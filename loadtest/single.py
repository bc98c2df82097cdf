"""``routegate loadtest run``: one trace at one load, or a ramp of loads, at one target.

    report = await run_single(args, tmp)     # args from ``loadtest.commands``

The target is the simulated demo fleet behind a gateway this starts, or any
URL with a key. Against another server the cost columns need routegate's
``/v1/usage``; without it they are left out, the latency figures stay.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

from loadtest.client import RunLimits, Target
from loadtest.fleet import energy_table, fleet_config, gateway_process, slo_of
from loadtest.prompts import PromptBuilder
from loadtest.run import BookKeeping, measure_run
from loadtest.stats import Slo
from loadtest.traces import TraceRequest, azure_trace, mix_trace, read_jsonl, with_pool


def make_trace(spec: str, rps: float, duration_s: float, max_output: int, pool: str
               ) -> list[TraceRequest]:
    """``conv`` / ``code`` (Azure, scaled), ``mix:chat:0.7,rag:0.3`` (Poisson), or a JSONL path
    (replayed as recorded: ``rps`` does not apply)."""
    if spec in ("conv", "code"):
        trace = azure_trace(spec, rps, duration_s, max_output=max_output)
    elif spec.startswith("mix:"):
        trace = [replace(r, output_tokens=min(r.output_tokens, max_output))
                 for r in mix_trace(spec[4:], rps, duration_s)]
    else:
        trace = read_jsonl(spec)
    return with_pool(trace, pool) if pool != "interactive" else trace


@contextlib.contextmanager
def _target(args: argparse.Namespace, tmp: Path) -> Iterator[tuple[Target, Any, Any]]:
    if args.url:
        if not args.key:
            raise SystemExit("--url needs --key (or ROUTEGATE_KEY)")
        keys = {"interactive": args.key, "batch": args.key}
        yield Target(args.url.rstrip("/"), keys, model=args.model), BookKeeping(keys), None
        return
    config = fleet_config(args.policy, tmp)
    with gateway_process(config, tmp) as gw:
        yield (Target(gw.url, gw.keys, model=args.model),
               BookKeeping(gw.keys, energy_table(config)), gw.cpu_seconds)


async def _has_books(target: Target) -> bool:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        try:
            async with session.get(target.url + "/v1/usage", headers={
                    "authorization": f"Bearer {target.key('interactive')}"}) as resp:
                return resp.status == 200
        except aiohttp.ClientError:
            return False


async def run_single(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    loads = [float(x) for x in args.ramp.split(",")] if args.ramp else [args.rps]
    ttft, tpot = slo_of()
    slos: dict[str, Slo | None] = {"interactive": Slo(ttft, tpot), "batch": None}
    limits = RunLimits(args.duration, args.max_requests, args.grace)
    builder = PromptBuilder()
    runs = []
    with _target(args, tmp) as (target, books, cpu):
        books = books if await _has_books(target) else None
        for rps in loads:
            trace = make_trace(args.trace, rps, args.duration, args.max_output, args.pool)
            row = await measure_run(target, trace, limits, slos, books=books, builder=builder,
                                    progress=not args.no_progress, gateway_cpu=cpu)
            runs.append({"scenario": "run", "policy": args.policy if not args.url else "-",
                         "trace": args.trace, "offered_rps": rps,
                         "batch_rps": rps if args.pool == "batch" else 0.0, **row})
    return {"runs": runs, "slo": {"ttft_ms": ttft * 1000, "tpot_ms": tpot * 1000},
            "target": args.url or "simulated demo fleet"}

"""``routegate loadtest experiment``: scenarios on the simulated demo fleet.

    routegate loadtest experiment --quick --out /tmp/lt      # about 2.5 minutes
    routegate loadtest experiment --out docs/loadtest        # the full sweep, about 10 min

- ``load_sweep``: each policy in ``POLICIES`` as the offered interactive load
  rises past saturation (one gateway per policy, load points in rising order);
- ``with_batch``: interactive traffic alone (``batch_rps`` 0), then alongside
  an open-loop batch job (``x-routegate-pool: batch``) that alone would
  saturate the fleet;
- ``two_replicas``: ``slo_aware`` on the same fleet served by standalone
  simulators (one per model, so replicas share its queues), with one gateway,
  then two behind a round-robin client, without and then with the
  upstreams' load signals (``load_metrics: vllm``, the simulators' /metrics).
  The replicas share one Redis (the embedded one on their shared data_dir);
- ``agent_sessions`` (asked for by name): tool-using agent sessions, cache-aware
  routing against cache-blind and always-``large`` (``loadtest/agent_sessions.py``).

The routers compared (``loadtest/fleet.py``, ``POLICY_CHOICES``): ``cheapest``
(cheapest-first: the cheapest model meeting the request's quality target,
blind to load), ``quality`` (quality-only: the most capable model for all),
``slo_aware`` (cheapest meeting the quality target and the predicted SLO,
with on-time admission, paying at most the demo's ``max_slo_premium`` to meet
the SLO), and in the full sweep ``cheapest_on_time`` (cheapest-first with
that admission: what the routing itself adds) and ``slo_aware_unbounded``
(no premium cap: what spilling to dearer models buys, and costs).

Interactive arrivals and lengths come from the Azure chat trace, batch from
the code trace (long prompts, short answers: offline summarisation's shape).
Arrivals are open-loop at exactly ``offered_rps`` (``loadtest/traces.py``
squeezes the trace's window, the client never waits for answers).
Outputs are capped at ``Plan.max_output`` tokens so that every run ends within
seconds of its window. The full sweep's grace outlasts the slowest answer the
gateway may start at the window's end (256 tokens on ``large`` at full batch,
11.5 s): an answer the harness cuts is billed but never completes, which
would charge slow models for the run's end rather than for their work.

Each request asks for a quality target from ``QUALITY_MIX``: the traces
carry no text, so the share of demanding requests is stated instead of
guessed from synthetic prompts.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadtest.agent_sessions import agent_sessions
from loadtest.agent_sessions import targets as session_targets
from loadtest.client import RunLimits, Target
from loadtest.fleet import (
    energy_table,
    fleet_config,
    gateway_policy,
    gateway_process,
    slo_of,
    standalone_fleet,
)
from loadtest.prompts import PromptBuilder
from loadtest.run import BookKeeping, measure_run
from loadtest.stats import Slo
from loadtest.traces import TraceRequest, azure_trace, merge, with_pool, with_quality

POLICIES = ["cheapest", "quality", "slo_aware"]
SCENARIOS = ("load_sweep", "with_batch", "two_replicas", "agent_sessions")
DEFAULT_SCENARIOS = ("load_sweep", "with_batch", "two_replicas")
QUALITY_MIX = {0.6: 0.8, 0.75: 0.2}   # most chat is easy for small; a fifth asks for more
TRACE_OFFSET = 2000                   # skip the trace's first half hour's quiet start


@dataclass(frozen=True)
class Plan:
    loads: list[float]                # offered interactive req/s in load_sweep
    window_s: float                   # arrivals per run
    grace_s: float                    # then open requests are cut
    mixed_rps: float                  # interactive req/s in with_batch
    batch_rps: float                  # the batch job's req/s: above what the fleet serves
    policies: list[str] = field(default_factory=lambda: list(POLICIES))
    batch_policy: str = "slo_aware"
    max_output: int = 256
    signals_interval_s: float = 1.0   # two_replicas: how often a gateway reads /metrics
    quick: bool = False               # agent_sessions: its short plan


QUICK = Plan(loads=[6, 14, 24], window_s=6, grace_s=6, mixed_rps=6, batch_rps=16, quick=True)
# The full sweep adds cheapest-first with slo_aware's on-time admission: what
# the routing itself adds (loadtest/fleet.py, POLICY_CHOICES).
FULL = Plan(loads=[4, 8, 12, 16, 24], window_s=15, grace_s=16, mixed_rps=6, batch_rps=16,
            policies=[*POLICIES, "cheapest_on_time", "slo_aware_unbounded"])


def interactive_trace(plan: Plan, rps: float) -> list[TraceRequest]:
    trace = azure_trace("conv", rps, plan.window_s, offset=TRACE_OFFSET,
                        max_output=plan.max_output)
    return with_quality(trace, QUALITY_MIX, seed=int(rps * 100))


def batch_trace(plan: Plan, rps: float) -> list[TraceRequest]:
    trace = azure_trace("code", rps, plan.window_s, offset=TRACE_OFFSET,
                        max_output=plan.max_output)
    return with_pool(trace, "batch")


def _slos() -> dict[str, Slo | None]:
    ttft, tpot = slo_of()
    return {"interactive": Slo(ttft, tpot), "batch": None}


async def _runs_on_gateway(policy: str, work: list[tuple[dict[str, Any], list[TraceRequest]]],
                           plan: Plan, tmp: Path, builder: PromptBuilder) -> list[dict[str, Any]]:
    """Start a gateway for ``policy``, send each trace in turn; one report row each."""
    config = fleet_config(policy, tmp / policy)
    rows = []
    with gateway_process(config, tmp / policy) as gw:
        target = Target(gw.url, gw.keys)
        books = BookKeeping(gw.keys, energy_table(config))
        limits = RunLimits(plan.window_s, 100_000, plan.grace_s)
        for label, trace in work:
            print(f"  {label['scenario']} {policy} interactive={label['offered_rps']} "
                  f"batch={label['batch_rps']}", flush=True)
            row = await measure_run(target, trace, limits, _slos(), books=books,
                                    builder=builder, gateway_cpu=gw.cpu_seconds)
            rows.append({**label, "policy": policy, "gateway_policy": gateway_policy(policy)[0],
                         **row})
    return rows


async def _runs_on_replicas(replicas: int, signals: bool, plan: Plan, tmp: Path,
                            builder: PromptBuilder) -> list[dict[str, Any]]:
    """slo_aware on the standalone fleet: ``replicas`` gateways, round-robin, one sweep."""
    policy = "slo_aware"
    name = f"{replicas}x{'-signals' if signals else ''}"
    base = fleet_config(policy, tmp / name)
    rows = []
    with standalone_fleet(base, tmp / name / "fleet", signals=signals,
                          interval_s=plan.signals_interval_s) as config, \
            contextlib.ExitStack() as stack:
        gws = [stack.enter_context(gateway_process(config, tmp / name / f"replica{i}"))
               for i in range(replicas)]
        target = Target(gws[0].url, gws[0].keys, replicas=tuple(gw.url for gw in gws))
        books = BookKeeping(gws[0].keys, energy_table(config))
        limits = RunLimits(plan.window_s, 100_000, plan.grace_s)
        for rps in sorted(plan.loads):
            label = {"scenario": "two_replicas", "offered_rps": float(rps), "batch_rps": 0.0,
                     "replicas": replicas, "signals": signals}
            print(f"  two_replicas {policy} replicas={replicas} signals={signals} "
                  f"interactive={rps}", flush=True)
            row = await measure_run(target, interactive_trace(plan, rps), limits, _slos(),
                                    books=books, builder=builder,
                                    gateway_cpu=lambda: sum(gw.cpu_seconds() for gw in gws))
            rows.append({**label, "policy": f"{policy} x{replicas}"
                         + (" +signals" if signals else ""),
                         "gateway_policy": gateway_policy(policy)[0], **row})
    return rows


async def two_replicas(plan: Plan, tmp: Path, builder: PromptBuilder) -> list[dict[str, Any]]:
    rows = []
    for replicas, signals in ((1, False), (2, False), (2, True)):
        rows += await _runs_on_replicas(replicas, signals, plan, tmp, builder)
    return rows


async def load_sweep(plan: Plan, tmp: Path, builder: PromptBuilder) -> list[dict[str, Any]]:
    rows = []
    for policy in plan.policies:
        work = [({"scenario": "load_sweep", "offered_rps": float(rps), "batch_rps": 0.0},
                 interactive_trace(plan, rps)) for rps in sorted(plan.loads)]
        rows += await _runs_on_gateway(policy, work, plan, tmp, builder)
    return rows


async def with_batch(plan: Plan, tmp: Path, builder: PromptBuilder) -> list[dict[str, Any]]:
    inter = interactive_trace(plan, plan.mixed_rps)
    label = {"scenario": "with_batch", "offered_rps": float(plan.mixed_rps)}
    work = [({**label, "batch_rps": 0.0}, inter),
            ({**label, "batch_rps": float(plan.batch_rps)},
             merge(inter, batch_trace(plan, plan.batch_rps)))]
    return await _runs_on_gateway(plan.batch_policy, work, plan, tmp, builder)


def targets(runs: list[dict[str, Any]], slo_ttft_ms: float) -> dict[str, Any]:
    """The issue's two targets, judged on these runs."""
    sweep = [r for r in runs if r["scenario"] == "load_sweep"]
    top = max((r["offered_rps"] for r in sweep), default=None)
    at_top = {r["policy"]: r for r in sweep if r["offered_rps"] == top}
    out: dict[str, Any] = {"highest_load_rps": top}
    cheap, slo = at_top.get("cheapest"), at_top.get("slo_aware")
    if cheap and slo:
        g0, g1 = cheap["pools"]["interactive"]["goodput_rps"], slo["pools"]["interactive"]["goodput_rps"]
        c0, c1 = cheap.get("cost_per_completed_usd"), slo.get("cost_per_completed_usd")
        out["goodput_ratio"] = round(g1 / g0, 2) if g0 else None
        out["cost_ratio"] = round(c1 / c0, 2) if c0 and c1 else None
        out["goodput_met"] = g1 >= 1.5 * g0 and g1 > 0
        out["cost_met"] = out["cost_ratio"] is not None and out["cost_ratio"] <= 1.2
    admit = at_top.get("cheapest_on_time")
    if admit and slo:   # not a target: how much of the gain is the routing's own
        g2 = admit["pools"]["interactive"]["goodput_rps"]
        out["goodput_ratio_vs_cheapest_on_time"] = round(g1 / g2, 2) if g2 else None
    fleet = [r for r in runs if r["scenario"] == "two_replicas"]
    if fleet:   # the fleet across hosts: 2 replicas keep >= 0.9x one replica's goodput
        top2 = max(r["offered_rps"] for r in fleet)
        goodput = {(r["replicas"], r["signals"]): r["pools"]["interactive"]["goodput_rps"]
                   for r in fleet if r["offered_rps"] == top2}
        one = goodput.get((1, False))
        out["two_replicas_highest_load_rps"] = top2
        for signals, key in ((True, "two_replicas_goodput_ratio"),
                             (False, "two_replicas_goodput_ratio_without_signals")):
            two = goodput.get((2, signals))
            out[key] = round(two / one, 2) if one and two is not None else None
        ratio = out["two_replicas_goodput_ratio"]
        out["two_replicas_met"] = ratio is not None and ratio >= 0.9
    mixed = [r for r in runs if r["scenario"] == "with_batch" and r["batch_rps"] > 0]
    if mixed:
        p95 = mixed[0]["pools"]["interactive"]["ttft_ms"]["p95"]
        batch_goodput = mixed[0]["pools"]["batch"]["goodput_rps"]
        out["with_batch_interactive_p95_ttft_ms"] = p95
        out["with_batch_batch_goodput_rps"] = batch_goodput
        out["isolation_met"] = p95 is not None and p95 <= slo_ttft_ms and batch_goodput > 0
    return out


async def run_experiment(plan: Plan, out: Path, scenarios: tuple[str, ...] = DEFAULT_SCENARIOS
                         ) -> dict[str, Any]:
    started = time.time()
    builder = PromptBuilder()
    tmp = out / "work"
    runs: list[dict[str, Any]] = []
    for name, scenario in (("load_sweep", load_sweep), ("with_batch", with_batch),
                           ("two_replicas", two_replicas)):
        if name in scenarios:
            runs += await scenario(plan, tmp, builder)
    if "agent_sessions" in scenarios:
        runs += await agent_sessions(plan.quick, tmp, builder)
    ttft, tpot = slo_of()
    return {
        "plan": asdict(plan), "quality_mix": {str(k): v for k, v in QUALITY_MIX.items()},
        "slo": {"ttft_ms": ttft * 1000, "tpot_ms": tpot * 1000},
        "traces": {"interactive": "azure_llm_2023_conv.csv", "batch": "azure_llm_2023_code.csv"},
        "runs": runs, "targets": {**targets(runs, ttft * 1000), **session_targets(runs)},
        "duration_s": round(time.time() - started, 1),
    }

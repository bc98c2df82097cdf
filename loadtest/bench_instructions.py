"""Instructions per request: what the proxy benchmark's seconds cannot show.

    python -m loadtest.bench_instructions --targets bare-aiohttp,routegate,routegate-nobudget

Seconds on a shared 2-core VM move by up to 20% from run to run; the number
of instructions a server runs per request barely moves, so a change of a few
percent shows. Each target of ``loadtest/bench_proxy.py`` (one at a time, in
front of the same stub upstream) runs under valgrind's callgrind with
counting off; after ``--warmup`` requests it is switched on for
``--requests`` requests (``--stream``: streamed) at ``--concurrency``, then dumped and
read. Under valgrind a server runs some 50 times slower, so what depends on
timing (how many reserves share a Redis call) differs from a real run: the
figure is for comparing code, not a throughput. Needs valgrind
(``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from loadtest.bench_proxy import request_body
from loadtest.servers import free_port
from loadtest.targets import KEY, running, target_command, wait_classifier

TARGETS = ("bare-aiohttp", "routegate", "routegate-nobudget")


async def send(url: str, count: int, concurrency: int, stream: bool,
               model: str = "stub") -> None:
    """``count`` requests, ``concurrency`` at a time; any status but 200 fails the run."""
    body = request_body(stream, model).encode()
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    left = count

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            async with session.post(url, data=body, headers=headers) as resp:
                text = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{url}: HTTP {resp.status}: {text[:300]!r}")

    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))


def instructions(dump: Path) -> int:
    """The total of a callgrind dump (its ``summary:`` or ``totals:`` line)."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise ValueError(f"{dump}: no summary line")


def measure(name: str, stub: str, tmp: Path, args: argparse.Namespace) -> float:
    """Instructions per request of one target."""
    port = free_port()
    command, ready = target_command(name, stub, port, tmp)
    out = tmp / f"{name}.callgrind"
    wrapper = ("valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={out}")
    base = f"http://127.0.0.1:{port}"
    with running(command, base + ready, tmp / f"{name}.log", wrapper=wrapper,
                 timeout=300, stop_s=60) as proc:
        if not name.startswith("bare-"):
            wait_classifier(base, timeout=900)      # valgrind: 50 times slower
        url = base + "/v1/chat/completions"
        asyncio.run(send(url, args.warmup, args.concurrency, args.stream, args.model))
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True,
                       capture_output=True)
        asyncio.run(send(url, args.requests, args.concurrency, args.stream, args.model))
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True,
                       capture_output=True)
        for _ in range(100):        # the dump is written by the process, after the call
            dumps = sorted(tmp.glob(f"{name}.callgrind.*"))
            if dumps:
                break
            time.sleep(0.1)
    if args.keep:               # for callgrind_annotate: which functions the count is in
        args.keep.mkdir(parents=True, exist_ok=True)
        suffix = ("-stream" if args.stream else "") + ("" if args.model == "stub" else "-auto")
        shutil.copy(dumps[-1], args.keep / f"{name}{suffix}.callgrind")
    return instructions(dumps[-1]) / args.requests


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default=",".join(TARGETS),
                        help="comma-separated: bare-aiohttp, bare-httpx, routegate, "
                             "routegate-nobudget, ...")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--stream", action="store_true", help="streamed requests (SSE)")
    parser.add_argument("--model", default="stub",
                        help="the requests' model: auto routes them (classifier, router)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy each target's callgrind dump into this directory")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("needs valgrind: apt-get install valgrind", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rg-instr-") as scratch:
        tmp = Path(scratch)
        stub_port = free_port()
        stub = f"http://127.0.0.1:{stub_port}"
        with running(["loadtest.stub_upstream", "--port", str(stub_port)], stub + "/health",
                     tmp / "stub.log"):
            print(f"{'streamed' if args.stream else 'non-streamed'}, c={args.concurrency}, "
                  f"{args.requests} requests after "
                  f"{args.warmup} of warm-up, instructions per request (callgrind):")
            for name in args.targets.split(","):
                per_request = measure(name, stub, tmp, args)
                print(f"  {name:<20} {per_request / 1000:8,.0f}k")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Batch API throughput: lines per second with 1 and 2 replicas, and create → completed time.

    python loadtest/bench_batch.py                    # 10,000 lines, 1 then 2 replicas
    python loadtest/bench_batch.py --lines 2000 --replicas 1 --concurrency 16

Starts the standalone simulator (fast physics, as in the tests) and gateway
replicas sharing the Redis on 127.0.0.1:6379 (unique key prefixes; the file
bytes in its redis blob store), uploads N chat lines with the official SDK, creates the batch and
polls until it completes. Prints, per replica count: upload time, create →
completed time, and lines/s over that span.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import openai
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtest.servers import TEST_KEY, base_config, run_gateway, run_simulator


def jsonl(n: int, max_tokens: int) -> bytes:
    return b"".join(orjson.dumps({
        "custom_id": f"line-{i}", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": "fast", "max_tokens": max_tokens,
                 "messages": [{"role": "user", "content": f"Summarise item {i} in one line."}]}})
        + b"\n" for i in range(n))


def run_once(sim_url: str, replicas: int, args: argparse.Namespace) -> dict[str, Any]:
    batch = {"key_prefix": f"rgbbench-{uuid.uuid4().hex[:8]}", "concurrency": args.concurrency,
             "poll_interval_s": 0.05}
    config = base_config(sim_url, batch=batch, max_body_bytes=10 * 1024 * 1024)
    config["data_dir"] = tempfile.mkdtemp(prefix="rg-bench-batch-")
    with contextlib.ExitStack() as stack:
        gateways = [stack.enter_context(run_gateway(config)) for _ in range(replicas)]
        client = openai.OpenAI(base_url=gateways[0].base_url, api_key=TEST_KEY, timeout=120)
        data = jsonl(args.lines, args.max_tokens)
        t0 = time.perf_counter()
        upload = client.files.create(file=("bench.jsonl", io.BytesIO(data)), purpose="batch")
        t1 = time.perf_counter()
        job = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                    completion_window="24h")
        t2 = time.perf_counter()
        while job.status not in ("completed", "failed", "expired", "cancelled"):
            time.sleep(0.25)
            job = client.batches.retrieve(job.id)
        t3 = time.perf_counter()
    counts = job.request_counts
    assert counts is not None
    return {"replicas": replicas, "status": job.status, "completed": counts.completed,
            "failed": counts.failed, "upload_s": t1 - t0, "create_s": t2 - t1,
            "create_to_done_s": t3 - t1, "lines_per_s": args.lines / (t3 - t1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--concurrency", type=int, default=8, help="batch.concurrency per replica")
    parser.add_argument("--max-tokens", type=int, default=40)
    args = parser.parse_args()
    with run_simulator("--tpot-ms", "2", "--prefill", "200000", "--output-mean", "20") as sim:
        print(f"{args.lines} lines, concurrency {args.concurrency} per replica, simulated fleet")
        print(f"{'replicas':>8} {'status':>10} {'ok':>6} {'failed':>6} {'upload s':>9} "
              f"{'create s':>9} {'create→done s':>14} {'lines/s':>8}")
        for replicas in args.replicas:
            r = run_once(sim, replicas, args)
            print(f"{r['replicas']:>8} {r['status']:>10} {r['completed']:>6} {r['failed']:>6} "
                  f"{r['upload_s']:>9.2f} {r['create_s']:>9.2f} {r['create_to_done_s']:>14.1f} "
                  f"{r['lines_per_s']:>8.0f}", flush=True)


if __name__ == "__main__":
    main()

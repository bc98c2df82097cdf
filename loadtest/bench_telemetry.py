"""What telemetry costs per request, in process: the metrics, the request log, both.

    python -m loadtest.bench_telemetry            # microseconds per request

Feeds 20,000 ``Outcome`` records to ``Metrics.observe`` and ``RequestLog.completed``
(JSON to /dev/null and to a scratch ``requests.jsonl``) inside an event loop,
so batched writes and flushes happen as they do under load. Compare with
routegate's CPU per request (1 / its req/s at c=32 in ``loadtest.bench_proxy``,
about 400-600 us on the 2-core VM) for the share of throughput.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from core.config import GatewayConfig, LoggingConfig
from gateway.observe.metrics import Metrics
from gateway.observe.request_log import LogFile, RequestLog
from gateway.pipeline.outcome import Outcome

N = 20_000


def outcome(i: int) -> Outcome:
    return Outcome(f"req_{i:024x}", None, team="bench", key="abc123", model="stub",
                   reason="requested", attempts=1, prompt_tokens=12, completion_tokens=7,
                   cost_usd=1.2e-6, ttft_s=0.003, tpot_s=0.001, latency_s=0.004,
                   trace_id="ab" * 16, classify_s=0.0002)


async def per_request_us(observe: Callable[[Outcome], None]) -> float:
    records = [outcome(i) for i in range(N)]
    started = time.perf_counter()
    for i, o in enumerate(records):
        observe(o)
        if i % 32 == 0:
            await asyncio.sleep(0)   # let the flush timers run, as under load
    spent = time.perf_counter() - started
    await asyncio.sleep(FLUSH_WAIT_S)
    return spent / N * 1e6


FLUSH_WAIT_S = 0.1


async def main() -> None:
    config = GatewayConfig.model_validate({"models": [{
        "name": "stub", "backend": "simulated",
        "price": {"input_per_mtok": 1, "output_per_mtok": 1}}]})
    tmp = Path(tempfile.mkdtemp(prefix="rg-telemetry-"))
    with open(os.devnull, "wb") as null:
        log = RequestLog(LoggingConfig(), LogFile(tmp / "requests.jsonl", 64 << 20, 1),
                         stderr=null, tty=False)
        metrics = Metrics(config)
        def both(o: Outcome) -> None:
            metrics.observe(o)
            log.completed(o)

        runs: list[tuple[str, Callable[[Outcome], None]]] = [
            ("metrics", metrics.observe), ("request log", log.completed), ("both", both)]
        for label, observe in runs:
            print(f"{label:12} {await per_request_us(observe):6.2f} us/request")
        metrics.flush()
        log.close()


if __name__ == "__main__":
    asyncio.run(main())

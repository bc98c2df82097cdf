"""The open-loop client: sends a trace on its own clock and times every answer.

    target = Target("http://127.0.0.1:8080", keys={"interactive": "sk-..", "batch": "sk-.."})
    results = asyncio.run(replay(target, trace, RunLimits(duration_s=30, max_requests=5000)))

Open loop: each request leaves at its arrival time whether or not earlier
ones have answered, so a slow server meets a growing queue, not a polite
client. A run is bounded: nothing is sent after ``duration_s`` or past
``max_requests``; requests still open ``grace_s`` later are cancelled and
counted as cut. Every request streams with ``stream_options.include_usage``
and is timed at its first content chunk (TTFT), between content chunks
(ITL) and at its end (E2E).
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field

import aiohttp
import orjson

from loadtest.prompts import PromptBuilder
from loadtest.traces import TraceRequest

POOL_HEADER = "x-routegate-pool"


@dataclass(frozen=True)
class Target:
    url: str                            # the gateway's base URL, without /v1
    keys: dict[str, str]                # pool -> API key (one key may serve both)
    model: str = "auto"
    pool_header: bool = True            # send x-routegate-pool for non-interactive pools
    # Gateway replicas behind a round-robin client (request n goes to n mod len);
    # empty: every request to ``url``.
    replicas: tuple[str, ...] = ()

    def key(self, pool: str) -> str:
        return self.keys.get(pool) or self.keys["interactive"]

    def url_for(self, n: int) -> str:
        return self.replicas[n % len(self.replicas)] if self.replicas else self.url


@dataclass(frozen=True)
class RunLimits:
    duration_s: float = 30.0            # no request is sent after this
    max_requests: int = 20_000
    grace_s: float = 15.0               # then what is still open is cancelled


@dataclass(slots=True)
class Result:
    sent_at: float                      # seconds from the run's start
    pool: str
    kind: str
    prompt_tokens: int
    max_tokens: int
    late_s: float = 0.0                 # how far behind its arrival time the client sent it
    status: int = 0                     # 0: no answer (connection error, or cut at the end)
    error: str | None = None
    model: str | None = None
    attempts: int = 1
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int = 0
    usage: dict | None = None
    itl_s: list[float] = field(default_factory=list)
    completed: bool = False             # 200 and the stream ran to [DONE]

    @property
    def tpot_s(self) -> float | None:
        if not self.completed or self.ttft_s is None or self.e2e_s is None:
            return None
        if self.output_tokens <= 1:
            return 0.0
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


def _body(req: TraceRequest, builder: PromptBuilder, n: int, model: str) -> bytes:
    if req.quality is not None and model == "auto":
        model = f"auto:{req.quality:g}"
    return orjson.dumps({
        "model": model, "stream": True, "stream_options": {"include_usage": True},
        "max_tokens": req.output_tokens,
        "messages": builder.messages(req.prompt_tokens, request_no=n, passages=req.passages),
    })


async def _read_stream(resp: aiohttp.ClientResponse, res: Result, start: float) -> None:
    clock = time.perf_counter
    last = 0.0
    async for line in resp.content:
        if not line.startswith(b"data: "):
            continue
        data = line[6:].strip()
        if data == b"[DONE]":
            res.completed = True
            break
        chunk = orjson.loads(data)
        if chunk.get("usage"):
            res.usage = chunk["usage"]
        if "error" in chunk:
            res.error = str(chunk["error"].get("code") or chunk["error"].get("type"))
            break
        choices = chunk.get("choices") or ()
        if choices and (choices[0].get("delta") or {}).get("content"):
            now = clock()
            if res.ttft_s is None:
                res.ttft_s = now - start
            else:
                res.itl_s.append(now - last)
            last = now
            res.output_tokens += 1
    res.e2e_s = clock() - start
    if res.usage:
        res.output_tokens = res.usage.get("completion_tokens", res.output_tokens)


async def send_one(session: aiohttp.ClientSession, target: Target, body: bytes,
                   res: Result, url: str | None = None) -> None:
    headers = {"authorization": f"Bearer {target.key(res.pool)}",
               "content-type": "application/json"}
    if target.pool_header and res.pool != "interactive":
        headers[POOL_HEADER] = res.pool
    start = time.perf_counter()
    try:
        async with session.post((url or target.url) + "/v1/chat/completions", data=body,
                                headers=headers) as resp:
            res.status = resp.status
            res.model = resp.headers.get("x-routegate-model")
            res.attempts = len(resp.headers.get("x-routegate-attempts", "x").split(","))
            if resp.status != 200:
                payload = await resp.read()
                res.error = _error_code(payload, resp.status)
                res.e2e_s = time.perf_counter() - start
                return
            await _read_stream(resp, res, start)
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        res.error = type(exc).__name__


def _error_code(payload: bytes, status: int) -> str:
    try:
        err = orjson.loads(payload)["error"]
        return str(err.get("code") or err.get("type") or status)
    except (ValueError, KeyError, TypeError):
        return str(status)


async def replay(target: Target, trace: list[TraceRequest], limits: RunLimits, *,
                 builder: PromptBuilder | None = None, progress: bool = True) -> list[Result]:
    """Send ``trace`` open-loop and return one Result per request sent."""
    from tqdm import tqdm

    builder = builder or PromptBuilder()
    trace = [r for r in trace if r.t < limits.duration_s][: limits.max_requests]
    results: list[Result] = []
    tasks: set[asyncio.Task[None]] = set()
    # A bar only on a terminal: piped into a log, its carriage returns fill the file.
    bar = tqdm(total=len(trace), unit="req", disable=not progress or not sys.stderr.isatty(),
               leave=False, dynamic_ncols=True)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        t0 = time.perf_counter()
        for n, req in enumerate(trace):
            body = _body(req, builder, n, target.model)   # built before its turn comes
            delay = req.t - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            res = Result(req.t, req.pool, req.kind, req.prompt_tokens, req.output_tokens,
                         late_s=max(0.0, -delay))
            results.append(res)
            task = asyncio.create_task(send_one(session, target, body, res, target.url_for(n)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            task.add_done_callback(lambda _: bar.update(1))
        await _drain(tasks, limits.grace_s)
    bar.close()
    for res in results:
        if not res.completed and res.error is None:
            res.error = "cut"
    return results


async def _drain(tasks: set[asyncio.Task[None]], grace_s: float) -> None:
    if not tasks:
        return
    _, pending = await asyncio.wait(set(tasks), timeout=grace_s)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=5)

"""The simulator as a standalone OpenAI-compatible HTTP server.

    python -m sim.server --port 9001 --tpot-ms 10 --prefill 8000

The ``model`` field picks a behaviour, so a fault test is one line:

    default (any name)   normal serving physics from the flags
    error                always HTTP 500
    flaky                HTTP 500 half the time
    slow                 prefill 50 tokens/s and 200 ms per token
    timeout              accepts, then never answers
    drop                 drops the connection mid-stream
    invalid-json         truncated JSON when response_format asks for JSON
    echo                 answers with the request body it received, as JSON text
    judge                a pairwise judge: "A" or "B", whichever of "Answer A:" and
                         "Answer B:" in the last message is longer ("T" if equal)
    no-usage             answers without ``usage`` (streams: without the usage chunk)
    negative-usage       reports negative token counts
    huge-usage           reports 10,000,000 completion tokens
    huge-prompt          reports 10,000,000 prompt tokens
    overflow-usage       reports 2**70 prompt and completion tokens (past 64 bits)
    unreadable-usage     reports a string and 1e300 as its token counts
    endless              streams tokens for ever, whatever max_tokens says
    no-done              streams end cleanly but without ``data: [DONE]``
    status-NNN           always HTTP NNN with an OpenAI error body (429: ``retry-after: 7``;
                         the message carries a fake credential, to test that it is scrubbed)
    retry-after-VALUE    always HTTP 429 with ``retry-after: VALUE`` (e.g. ``retry-after-99999999``)
    sequence-S.S.S-TAG   the statuses S in turn for the requests naming it (429s send
                         ``retry-after: 1``), then normal serving: an upstream that fails and
                         recovers (e.g. ``sequence-500.500.400-ab12``; a fresh TAG, a fresh count)

``GET /sim/requests`` lists what the server counted for each request it took
(prompt tokens from the body it received, ``sim_count.py``; completion
tokens generated, also for a request cut short): the independent count the
money tests hold the gateway's bills against. ``GET /sim/stats`` returns
per-behaviour counters (requests, cancelled, ...), and under ``"sequence"``
the requests seen per ``sequence-…`` name. ``GET /metrics``
publishes the load as vLLM does (``vllm:num_requests_running``: sequences
prefilling or decoding; ``vllm:num_requests_waiting``: not yet started, waiting
for a batch slot or for the prefill; ``vllm:kv_cache_usage_perc``: the
tokens the running sequences hold, prompt and output so far, a prefix block
they share once, over ``--kv-cache-tokens``; ``vllm:prefix_cache_queries_total``
and ``vllm:prefix_cache_hits_total``: prompt tokens looked up in the prefix
cache and found there, as vLLM V1 counts them), one series per behaviour
(``model_name``), so a gateway's ``load_metrics: {format: vllm}`` reads it.
``--no-prefix-cache`` keeps none; ``--prefix-cache-tokens`` sizes it apart from
the running sequences (by default it shares the KV cache with them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from backends.base import UpstreamCall
from core.config import ModelConfig, Price, SimulateConfig, Timeouts
from core.errors import GatewayError
from sim.backend import SimulatedBackend
from sim.count import encoding
from sim.scripted import error_response, named_answer

PROFILES: dict[str, dict[str, Any]] = {
    "error": {"error_rate": 1.0},
    "flaky": {"error_rate": 0.5},
    "slow": {"prefill_tokens_per_s": 50, "tpot_ms": 200},
    "timeout": {"timeout_rate": 1.0},
    "drop": {"drop_rate": 1.0},
    "invalid-json": {"invalid_json_rate": 1.0},
}


def build_backends(base: SimulateConfig) -> dict[str, SimulatedBackend]:
    def make(name: str, **overrides: Any) -> SimulatedBackend:
        sim = base.model_copy(update=overrides)
        cfg = ModelConfig(name=name, price=Price(input_per_mtok=0, output_per_mtok=0),
                          simulate=sim, timeouts=Timeouts(first_byte_s=3600))
        return SimulatedBackend(cfg)

    backends = {"default": make("default")}
    backends.update({name: make(name, **knobs) for name, knobs in PROFILES.items()})
    return backends


# Usage faults: what the upstream reports instead of the truth (None: no usage at all).
USAGE_FAULTS: dict[str, dict[str, Any] | None] = {
    "no-usage": None,
    "negative-usage": {"prompt_tokens": -5, "completion_tokens": -3, "total_tokens": -8},
    "huge-usage": {"prompt_tokens": 10, "completion_tokens": 10_000_000,
                   "total_tokens": 10_000_010},
    "huge-prompt": {"prompt_tokens": 10_000_000, "completion_tokens": 5,
                    "total_tokens": 10_000_005},
    "overflow-usage": {"prompt_tokens": 2**70, "completion_tokens": 2**70, "total_tokens": 2**71},
    "unreadable-usage": {"prompt_tokens": "12", "completion_tokens": 1e300, "total_tokens": 12},
}
def faulty_usage(body: bytes, fault: str) -> bytes:
    data = orjson.loads(body)
    usage = USAGE_FAULTS[fault]
    if usage is None:
        data.pop("usage", None)
    else:
        data["usage"] = usage
    return json.dumps(data).encode()     # orjson refuses integers past 64 bits


def faulty_event(raw: bytes, fault: str) -> bytes | None:
    """One SSE event as the faulty upstream sends it (None: not at all)."""
    if raw.startswith(b"data: [DONE]"):
        return None if fault == "no-done" else raw
    if fault in USAGE_FAULTS and b'"usage":{' in raw:
        data = orjson.loads(raw[len(b"data: "):])
        if USAGE_FAULTS[fault] is None:
            return None if not data.get("choices") else raw
        data["usage"] = USAGE_FAULTS[fault]
        return b"data: " + json.dumps(data).encode() + b"\n\n"
    return raw


async def until_disconnect(request: Request, work: Any) -> Any:
    """Run ``work``, cancelling it if the client disconnects, as vLLM and
    llama.cpp abort a generation nobody waits for (Starlette does not for
    non-streamed responses)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(request.receive())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return None
        return task.result()
    finally:
        watch.cancel()


async def serve(backend: SimulatedBackend, request: Request, call: UpstreamCall,
                fault: str | None) -> Response:
    """One simulated answer, streamed or not, with the named fault applied."""
    try:
        if not call.payload.get("stream"):
            completion = await until_disconnect(request, backend.complete(call))
            if completion is None:
                return Response(b"", status_code=499)
            body = faulty_usage(completion.body, fault) if fault in USAGE_FAULTS else (
                completion.body)
            return Response(body, media_type="application/json")
        stream = await backend.stream(call)
    except GatewayError as exc:
        return error_response(getattr(exc, "upstream_status", None) or 500, exc.message)

    async def relay() -> Any:
        try:
            async for event in stream:
                raw = faulty_event(event.raw, fault) if fault else event.raw
                if raw is not None:
                    yield raw
        finally:
            await stream.aclose()

    return StreamingResponse(relay(), media_type="text/event-stream")


def create_app(base: SimulateConfig) -> Starlette:
    backends = build_backends(base)
    encoding()     # the tokenizer its counts use, now rather than in the first request's TTFT
    sequence_seen: dict[str, int] = {}

    async def chat(request: Request) -> Response:
        try:
            payload = orjson.loads(await request.body())
            messages = payload["messages"]
            assert isinstance(messages, list) and messages
        except Exception:
            return error_response(400, "'messages' is required", "invalid_request")
        name = str(payload.get("model"))
        if (scripted := named_answer(name, payload, sequence_seen)) is not None:
            return scripted
        fault = name if name in USAGE_FAULTS or name == "no-done" else None
        call = UpstreamCall(request.headers.get("x-request-id", "sim"), payload, 0)
        return await serve(backends.get(name, backends["default"]), request, call, fault)

    async def models(request: Request) -> Response:
        data = [{"id": n, "object": "model", "created": 0, "owned_by": "sim"} for n in backends]
        return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")

    async def stats(request: Request) -> Response:
        counts: dict[str, Any] = {n: b.engine.stats.snapshot() for n, b in backends.items()}
        counts["sequence"] = sequence_seen
        return Response(orjson.dumps(counts), media_type="application/json")

    async def served(request: Request) -> Response:
        """What this server counted per request, newest last: its own bills."""
        rows = [row for b in backends.values() for row in b.served]
        return Response(orjson.dumps(rows), media_type="application/json")

    return Starlette(routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", other_route(backends, "completions", "prompt"),
              methods=["POST"]),
        Route("/v1/embeddings", other_route(backends, "embeddings", "input"),
              methods=["POST"]),
        Route("/v1/models", models),
        Route("/sim/stats", stats),
        Route("/sim/requests", served),
        Route("/metrics", metrics_route(backends)),
        Route("/health", health),
    ])


async def health(request: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


def metrics_route(backends: dict[str, SimulatedBackend]) -> Any:
    async def metrics(request: Request) -> Response:
        return Response(vllm_metrics(backends), media_type="text/plain; version=0.0.4")
    return metrics


def vllm_metrics(backends: dict[str, SimulatedBackend]) -> bytes:
    """The load of every behaviour, in vLLM's metric names (Prometheus text format)."""
    series = {"vllm:num_requests_running": ("gauge", "Requests in the model's batch."),
              "vllm:num_requests_waiting": ("gauge", "Requests waiting for a batch slot."),
              "vllm:kv_cache_usage_perc": ("gauge", "KV-cache use, 0..1 (simulated).")}
    lines = []
    for name, about, field in (
            ("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", "queries"),
            ("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", "hits")):
        lines += [f"# HELP {name} {about}", f"# TYPE {name} counter"]
        for model, backend in backends.items():
            value = getattr(backend.engine.prefix, field)
            lines.append(f'{name}_total{{model_name="{model}"}} {value}')
    for name, (kind, about) in series.items():
        lines += [f"# HELP {name} {about}", f"# TYPE {name} {kind}"]
        for model, backend in backends.items():
            engine = backend.engine
            st = engine.stats
            value = {"vllm:num_requests_running": st.running - st.prefill_queued,
                     "vllm:num_requests_waiting": st.queued + st.prefill_queued,
                     "vllm:kv_cache_usage_perc": engine.kv_usage()}[name]
            lines.append(f'{name}{{model_name="{model}"}} {value}')
    return ("\n".join(lines) + "\n").encode()


def other_route(backends: dict[str, SimulatedBackend], route: str, field: str) -> Any:
    """/v1/completions and /v1/embeddings: the same models and usage faults (the
    prompt counted by the backend, as for chat); the fault behaviours by name are chat's."""
    async def handle(request: Request) -> Response:
        try:
            payload = orjson.loads(await request.body())
            _texts(payload[field])
        except Exception:
            return error_response(400, f"'{field}' is required", "invalid_request")
        name = str(payload.get("model"))
        fault = name if name in USAGE_FAULTS else None
        call = UpstreamCall(request.headers.get("x-request-id", "sim"), payload, 0,
                            route=route)
        return await serve(backends.get(name, backends["default"]), request, call, fault)
    return handle


def _texts(value: Any) -> list[Any]:
    """A prompt or input: a string, token ids, or a list of either."""
    if isinstance(value, str) or (isinstance(value, list) and value
                                  and all(isinstance(t, int) for t in value)):
        return [value]
    if isinstance(value, list) and value:
        return value
    raise ValueError("empty")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9001)
    parser.add_argument("--prefill", type=float, default=8000, help="prompt tokens per second")
    parser.add_argument("--tpot-ms", type=float, default=10)
    parser.add_argument("--batch-slowdown", type=float, default=0.04)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--output-mean", type=int, default=40)
    parser.add_argument("--kv-cache-tokens", type=int, default=None,
                        help="KV-cache size in tokens (default: 4,096 per batch slot)")
    parser.add_argument("--prefix-cache", action=argparse.BooleanOptionalAction, default=True,
                        help="keep a prefix cache, as vLLM's automatic prefix caching")
    parser.add_argument("--prefix-cache-tokens", type=int, default=None,
                        help="the prefix cache's size apart from the running requests' KV "
                             "(default: it shares the KV cache with them)")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    base = SimulateConfig(prefill_tokens_per_s=args.prefill, tpot_ms=args.tpot_ms,
                          batch_slowdown=args.batch_slowdown, max_batch=args.max_batch,
                          output_tokens_mean=args.output_mean, seed=args.seed,
                          kv_cache_tokens=args.kv_cache_tokens, prefix_cache=args.prefix_cache,
                          prefix_cache_tokens=args.prefix_cache_tokens)
    uvicorn.run(create_app(base), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

"""The prompt cache's figures, bounded and shown as billed, on every door.

A scripted upstream on loopback (OpenAI chat and completions, Anthropic Messages)
reports the usage its model name picks. A real gateway bills it into the real
Redis; each request must be billed exactly the scripted figures (or their bound),
the client shown what was billed, and the request flagged when a figure was
refused. The last tests are pure: the readers, and the hold's bound.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from backends.anthropic_messages.from_wire import merged_usage, usage_of
from backends.bedrock.reply import read_usage
from budget.nanousd import cost_nanousd
from core.config import GatewayConfig, ModelConfig, ModelFacts, Price
from core.usage import Usage
from gateway.money.ceiling import Demand, Tariff
from gateway.money.pricing import billed_nano
from gateway.protocols.anthropic_messages.native import native_message
from tests.support import TEST_KEY, Gateway, child_env, free_port, hashed, run_gateway, stop, wait_http

P_IN, P_OUT, P_CACHED, P_WRITE = 2.0, 8.0, 0.2, 2.5
PRICE = {"input_per_mtok": P_IN, "output_per_mtok": P_OUT, "cached_input_per_mtok": P_CACHED,
         "cache_write_per_mtok": P_WRITE}
WINDOW = 32000
AUTH = {"authorization": f"Bearer {TEST_KEY}"}
ANTHROPIC_KEY_ENV = "CACHED_BOUNDS_ANTHROPIC_KEY"


def oai(prompt: int, cached: Any, **extra: Any) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": 10,
            "prompt_tokens_details": {"cached_tokens": cached, **extra}}


# The auditor's scenarios (/tmp/audit-billing/upstream.py), by upstream model name.
OPENAI: dict[str, dict[str, Any]] = {
    "o_plain": oai(1000, 800),
    "o_cached_gt": oai(100, 5000),
    "o_cached_neg": oai(1000, -500),
    "o_cached_float": oai(1000, 800.0),
    "o_cached_str": oai(1000, "800"),
    "o_cached_bool": oai(1000, True),
    "o_cached_huge": oai(1000, 10**30),
    "o_write_gt": oai(1000, 200, cache_write_tokens=5000),
    "o_details_list": {"prompt_tokens": 1000, "completion_tokens": 10,
                       "prompt_tokens_details": [1, 2]},
    "o_overcap": oai(50000, 49000),
}
ANTHROPIC: dict[str, dict[str, Any]] = {
    "a_plain": {"input_tokens": 10, "output_tokens": 20, "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 500},
    "a_write_only": {"input_tokens": 10, "output_tokens": 20, "cache_read_input_tokens": 0,
                     "cache_creation_input_tokens": 5000},
    "a_huge": {"input_tokens": 10, "output_tokens": 20, "cache_read_input_tokens": 10**30,
               "cache_creation_input_tokens": 10**30,
               "cache_creation": {"ephemeral_5m_input_tokens": 10**30,
                                  "ephemeral_1h_input_tokens": 0}},
    "a_bad_input": {"input_tokens": "ten", "output_tokens": 20},
}
WORDS = ["hello", " there", " friend"]


def sse(data: dict[str, Any], kind: str | None = None) -> bytes:
    head = f"event: {kind}\n".encode() if kind else b""
    return head + b"data: " + json.dumps(data).encode() + b"\n\n"


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    name, legacy = body["model"], request.path.endswith("/v1/completions")
    usage, kind = OPENAI[name.split("+")[0]], "text_completion" if legacy else "chat.completion"

    def choice(text: str | None, finish: str | None = None) -> dict[str, Any]:
        if legacy:
            return {"index": 0, "text": text or "", "finish_reason": finish}
        if not body.get("stream"):
            return {"index": 0, "message": {"role": "assistant", "content": text},
                    "finish_reason": finish}
        return {"index": 0, "delta": {} if text is None else {"content": text},
                "finish_reason": finish}
    if not body.get("stream"):
        return web.json_response({"id": "x", "object": kind, "created": 1, "model": name,
                                  "choices": [choice("".join(WORDS), "stop")], "usage": usage})
    base = {"id": "x", "object": kind + ("" if legacy else ".chunk"), "created": 1, "model": name}
    chunks = [{**base, "choices": [choice(word)]} for word in WORDS]
    if "+final" in name:         # Mistral's shape: the usage in the finish chunk
        chunks.append({**base, "choices": [choice(None, "stop")], "usage": usage})
    else:
        chunks += [{**base, "choices": [choice(None, "stop")]},
                   {**base, "choices": [], "usage": usage}]
    return await _stream(request, [sse(c) for c in chunks] + [b"data: [DONE]\n\n"])


async def _messages(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    name = body["model"]
    usage = ANTHROPIC[name]
    message: dict[str, Any] = {
        "id": "msg_x", "type": "message", "role": "assistant", "model": name,
        "content": [{"type": "text", "text": "".join(WORDS)}], "stop_reason": "end_turn",
        "stop_sequence": None, "usage": usage}
    if not body.get("stream"):
        return web.json_response(message)
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    frames: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": start}),
              ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
              *[("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": w}})
                for w in WORDS],
              ("content_block_stop", {"index": 0}),
              ("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                 "usage": {"output_tokens": usage["output_tokens"]}}),
              ("message_stop", {})]
    return await _stream(request, [sse({"type": kind, **data}, kind) for kind, data in frames])


async def _stream(request: web.Request, events: list[bytes]) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    for event in events:
        await resp.write(event)
    await resp.write_eof()
    return resp


def upstream_app() -> web.Application:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/v1/completions", _chat)
    app.router.add_post("/v1/messages", _messages)
    return app


@contextlib.contextmanager
def run_upstream() -> Iterator[str]:
    """The scripted upstream (this module, run as a script) on a free loopback port."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.gateway.test_cached_usage_bounds",
                             str(port)], env=child_env())
    try:
        wait_http(f"http://127.0.0.1:{port}/", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with run_upstream() as up:
        models = [{"name": name.replace("+", "-"), "backend": "openai_compat",
                   "base_url": up + "/v1", "upstream_model": name, "price": PRICE,
                   "context_window": WINDOW, "max_output_tokens": 1000}
                  for name in [*OPENAI, "o_plain+final", "o_cached_gt+final"]]
        models += [{"name": name, "backend": "anthropic", "base_url": up, "upstream_model": name,
                    "api_key_env": ANTHROPIC_KEY_ENV, "price": PRICE, "context_window": 200000,
                    "max_output_tokens": 1000} for name in ANTHROPIC]
        config = {"models": models, "teams": [{"name": "t", "keys": [hashed(TEST_KEY)]}],
                  "redis_url": "redis://127.0.0.1:6379/0",
                  "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
                  "batch": {"enabled": False}}
        with run_gateway(config, env={ANTHROPIC_KEY_ENV: "sk-ant-test"}) as gateway:
            yield gateway


def ledger(gw: Gateway, model: str) -> dict[str, int]:
    r = httpx.get(gw.base_url + "/usage", headers=AUTH)
    row: dict[str, Any] = next((x for x in r.json()["ledger"] if x["model"] == model), {})
    return {k: int(row.get(k, 0)) for k in ("requests", "input_tokens", "cached_tokens",
                                             "output_tokens", "cost_nanousd")}


def billed_for(gw: Gateway, model: str, before: dict[str, int]) -> dict[str, int]:
    """The request's ledger line, once its settle is stored."""
    deadline = time.monotonic() + 10
    while True:
        after = ledger(gw, model)
        if after["requests"] > before["requests"] or time.monotonic() > deadline:
            return {k: after[k] - before[k] for k in after}
        time.sleep(0.05)


def logged(gw: Gateway, r: httpx.Response) -> dict[str, Any]:
    rid = r.headers["x-routegate-request-id"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for line in reversed(gw.log().splitlines()):
            if rid in line and "request.completed" in line:
                return dict(json.loads(line[line.index("{"):]))
        time.sleep(0.05)
    raise AssertionError(f"no request.completed event for {rid}")


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: {")]


HELLO = [{"role": "user", "content": "Say hello."}]
DOORS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/chat/completions", {"messages": HELLO, "max_tokens": 50}),
    "completions": ("/completions", {"prompt": "Say hello.", "max_tokens": 50}),
    "responses": ("/responses", {"input": "Say hello.", "max_output_tokens": 50, "store": False}),
    "messages": ("/messages", {"messages": HELLO, "max_tokens": 50}),
}


def call(gw: Gateway, door: str, model: str, stream: bool) -> httpx.Response:
    path, body = DOORS[door]
    body = {**body, "model": model, "stream": stream}
    if stream and door in ("chat", "completions"):
        body["stream_options"] = {"include_usage": True}
    r = httpx.post(gw.base_url + path, json=body, timeout=30,
                   headers={**AUTH, "anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text
    return r


def shown(door: str, r: httpx.Response, stream: bool) -> tuple[int, int, int, int]:
    """(prompt, cached, written, output) as the door showed the client (a stream's last)."""
    got = events(r.text) if stream else []
    if not stream:
        usage = r.json()["usage"]
    elif door in ("chat", "completions"):
        usage = [e["usage"] for e in got if e.get("usage")][-1]
    elif door == "responses":
        usage = next(e["response"]["usage"] for e in got if e.get("type") == "response.completed")
    else:   # as Anthropic's SDK accumulates it: message_start's, overwritten by message_delta's
        start = next(e["message"]["usage"] for e in got if e.get("type") == "message_start")
        usage = merged_usage(start, [e["usage"] for e in got
                                     if e.get("type") == "message_delta"][-1])
        usage.pop("cache_creation", None)        # the SDK keeps message_start's
        if "cache_creation" in start:
            usage["cache_creation"] = start["cache_creation"]
    if door in ("chat", "completions"):
        details = usage.get("prompt_tokens_details") or {}
        return (usage["prompt_tokens"], details.get("cached_tokens", 0),
                details.get("cache_write_tokens", 0), usage["completion_tokens"])
    if door == "responses":
        details = usage["input_tokens_details"]
        return (usage["input_tokens"], details["cached_tokens"], details["cache_write_tokens"],
                usage["output_tokens"])
    read, written = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
    lifetimes = usage.get("cache_creation")     # the writes by lifetime, where shown, agree
    assert lifetimes is None or sum(lifetimes.values()) == written, usage
    return usage["input_tokens"] + read + written, read, written, usage["output_tokens"]


def served(gw: Gateway, door: str, model: str, stream: bool,
           split: tuple[int, int, int, int]) -> str | None:
    """Serve one request: the client must be shown ``split`` (prompt, cached, written,
    output), and be billed exactly that; returns the anomaly the request was flagged with."""
    before = ledger(gw, model)
    r = call(gw, door, model, stream)
    assert shown(door, r, stream) == split
    prompt, cached, written, output = split
    assert billed_for(gw, model, before) == {
        "requests": 1, "input_tokens": prompt, "cached_tokens": cached, "output_tokens": output,
        "cost_nanousd": cost_nanousd(prompt - cached - written, output, P_IN, P_OUT, cached,
                                     P_CACHED, written, P_WRITE)}
    return logged(gw, r)["usage_anomaly"]


# (scenario, the prompt, cached and written tokens billed, the anomaly)
BAD_CACHE = [
    ("o_cached_gt", (100, 100, 0), "over_cap"),         # at most the prompt
    ("o_cached_neg", (1000, 0, 0), "negative"),
    ("o_cached_float", (1000, 800, 0), None),           # 800.0: read as 800
    ("o_cached_str", (1000, 0, 0), "unreadable"),
    ("o_cached_bool", (1000, 0, 0), "unreadable"),
    ("o_cached_huge", (1000, 0, 0), "unreadable"),      # 1e30, as JSON reads it
    ("o_write_gt", (1000, 200, 800), "over_cap"),       # writes: the rest of the prompt
    ("o_details_list", (1000, 0, 0), "unreadable"),
]


@pytest.mark.parametrize("door", ["chat", "completions"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("scenario, split, anomaly", BAD_CACHE, ids=[c[0] for c in BAD_CACHE])
def test_a_bad_cache_figure_is_flagged_and_the_client_sees_the_bill(
        gw: Gateway, door: str, stream: bool, scenario: str, split: tuple[int, int, int],
        anomaly: str) -> None:
    """D1: the prompt and output are billed as reported, the cache's figure corrected."""
    assert served(gw, door, scenario, stream, (*split, 10)) == anomaly


@pytest.mark.parametrize("door", ["chat", "completions", "responses", "messages"])
@pytest.mark.parametrize("stream", [False, True])
def test_cached_tokens_are_shown_and_billed_exactly_on_every_door(
        gw: Gateway, door: str, stream: bool) -> None:
    """An OpenAI-style upstream's cached tokens (its usage in a chunk of its own when it
    streams), billed at the cached price and shown in each door's own shape."""
    assert served(gw, door, "o_plain", stream, (1000, 800, 0, 10)) is None


@pytest.mark.parametrize("door", ["responses", "messages"])
def test_usage_in_the_finish_chunk_is_what_every_door_shows_and_bills(
        gw: Gateway, door: str) -> None:
    """D2: Mistral's finish chunk carries the usage; the doors show the bill, not our count."""
    assert served(gw, door, "o_plain-final", True, (1000, 800, 0, 10)) is None


def test_a_bad_figure_in_the_finish_chunk_is_corrected_on_the_chat_door(gw: Gateway) -> None:
    """D2 on the chat door: a chunk with choices and usage is checked as a usage chunk is."""
    assert served(gw, "chat", "o_cached_gt-final", True, (100, 100, 0, 10)) == "over_cap"


@pytest.mark.parametrize("door, stream", [("chat", False), ("chat", True), ("responses", True)])
def test_anthropic_cache_writes_are_shown_under_one_name(gw: Gateway, door: str,
                                                         stream: bool) -> None:
    """D3: the Anthropic backend writes ``cache_write_tokens``, the name every reader reads."""
    assert served(gw, door, "a_write_only", stream, (5010, 0, 5000, 20)) is None


@pytest.mark.parametrize("stream", [False, True])
def test_the_messages_door_shows_anthropic_cache_reads_and_writes_untouched(
        gw: Gateway, stream: bool) -> None:
    """D3: with ``_billed_split`` gone, the native answer still shows the cache's writes
    (the billed usage is the stream's own, read with them)."""
    assert served(gw, "messages", "a_plain", stream, (1510, 1000, 500, 20)) is None


@pytest.mark.parametrize("door, stream", [("chat", False), ("messages", False),
                                          ("messages", True), ("responses", False)])
def test_a_bad_anthropic_cache_figure_keeps_the_input_and_output(gw: Gateway, door: str,
                                                                 stream: bool) -> None:
    """D4: cache counts of 1e30 are refused (0, flagged); input 10 and output 20 are billed."""
    assert served(gw, door, "a_huge", stream, (10, 0, 0, 20)) == "unreadable"


@pytest.mark.parametrize("door", ["chat", "messages"])
def test_unreadable_anthropic_usage_is_flagged_and_the_estimate_shown(gw: Gateway,
                                                                      door: str) -> None:
    """D4: usage that came but cannot be read is billed from our count, flagged, and shown."""
    before = ledger(gw, "a_bad_input")
    r = call(gw, door, "a_bad_input", stream=False)
    billed = billed_for(gw, "a_bad_input", before)
    prompt, _, _, output = shown(door, r, stream=False)
    assert (prompt, output) == (billed["input_tokens"], billed["output_tokens"])
    assert billed["cost_nanousd"] == cost_nanousd(prompt, output, P_IN, P_OUT)
    record = logged(gw, r)
    assert record["usage_anomaly"] == "unreadable" and record["usage_estimated"] is True


def test_an_over_reported_prompt_keeps_its_uncached_tokens_first(gw: Gateway) -> None:
    """D5: 50,000 prompt tokens (49,000 cached) on a 32,000 window: 1,000 uncached kept."""
    assert served(gw, "chat", "o_overcap", False, (WINDOW, WINDOW - 1000, 0, 10)) == "over_cap"


# The pure parts: the readers, and the bound.

def test_every_reader_reads_a_bad_cache_figure_as_zero_and_keeps_the_rest() -> None:
    """D4: Anthropic's and Bedrock's readers, like OpenAI's, keep input and output; the
    Messages door rewrites the usage whenever the bill was our estimate."""
    assert usage_of({"input_tokens": 10, "output_tokens": 5,
                     "cache_read_input_tokens": -1}) == Usage(10, 5, cache_anomaly="negative")
    assert read_usage({"inputTokens": 10, "outputTokens": 5, "cacheReadInputTokens": 3.5,
                       "cacheWriteInputTokens": 7})[0] == Usage(
        17, 5, cache_write_tokens=7, cache_anomaly="unreadable")
    assert Usage.from_wire(oai(110, 100.5)) == Usage(110, 10, cache_anomaly="unreadable")
    # A whole float is read as the prompt's own figure is.
    assert Usage.from_wire(oai(110, 100.0)) == Usage(110, 10, cached_tokens=100)
    native = json.dumps({"type": "message", "usage": {"input_tokens": 9}}).encode()
    assert json.loads(native_message(native, Usage(9, 3, estimated=True), False))["usage"] == {
        "input_tokens": 9, "output_tokens": 3, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}}


WRITE_DEAREST = {"cached_input_per_mtok": 0.2, "cache_write_per_mtok": 2.5}
READ_DEAREST = {"cached_input_per_mtok": 3.0}
INPUT_DEAREST = {"cached_input_per_mtok": 0.2}


@pytest.mark.parametrize("price, ours", [
    (READ_DEAREST, 1000),       # a prompt held at our count (D7)
    (READ_DEAREST, 40000),      # held at the window: over-reported prompts clamped (D5, D7)
    (WRITE_DEAREST, 40000),
    (INPUT_DEAREST, 40000),
], ids=["read-dearest", "read-dearest-window", "write-dearest-window", "input-dearest-window"])
def test_the_hold_bounds_every_split_of_the_prompt(price: dict[str, float], ours: int) -> None:
    """D7 (and D5's bound): any split of the held prompt, and any over-reported prompt
    clamped to the window, bills at most the hold; the dearest split bills it exactly."""
    model = ModelFacts.of(ModelConfig(name="m", context_window=WINDOW, max_output_tokens=1000,
                                      price=Price(input_per_mtok=P_IN, output_per_mtok=P_OUT,
                                                  **price)))
    tariff = Tariff(GatewayConfig(models=[model.config]))
    demand = Demand({"o200k_base": ours}, 1, 100)
    ceiling = tariff.ceiling(model, demand, 1.0)
    held = ceiling.prompt_tokens
    splits = [Usage(held, 100), Usage(held, 100, cached_tokens=held),
              Usage(held, 100, cache_write_tokens=held),
              Usage(held, 100, cached_tokens=held // 3, cache_write_tokens=held // 3)]
    bills = [billed_nano(model, u) for u in splits]
    assert max(bills) == ceiling.cost
    over = [Usage(50000, 100, cached_tokens=49000), Usage(50000, 100, cache_write_tokens=49000),
            Usage(50000, 100)]
    for reported in over if held == WINDOW else ():
        billed = tariff.bill(ceiling, reported, demand, 0, 1.0)
        assert billed.anomaly == "over_cap" and billed.cost <= ceiling.cost
        assert billed.usage.uncached_tokens == min(reported.uncached_tokens, WINDOW)


@pytest.mark.parametrize("backend", ["anthropic", "simulated"])
def test_an_hour_long_write_is_held_where_an_upstream_can_bill_one(backend: str) -> None:
    """Anthropic bills a write kept an hour at twice the input (the default of
    ``cache_write_1h_per_mtok``): the hold covers a prompt written that way; a model
    whose upstream keeps no hour-long write holds no more than before."""
    extra = {"base_url": "http://127.0.0.1:9/v1"} if backend == "anthropic" else {}
    model = ModelFacts.of(ModelConfig.model_validate({
        "name": "m", "backend": backend, "context_window": WINDOW, "max_output_tokens": 1000,
        **extra, "price": {"input_per_mtok": P_IN, "output_per_mtok": P_OUT, **WRITE_DEAREST}}))
    tariff = Tariff(GatewayConfig(models=[model.config]))
    demand = Demand({"o200k_base": 1000}, 1, 100)
    ceiling = tariff.ceiling(model, demand, 1.0)
    held = ceiling.prompt_tokens
    hour = billed_nano(model, Usage(held, 100, cache_write_tokens=held,
                                    cache_write_1h_tokens=held))
    assert hour == cost_nanousd(0, 100, P_IN, P_OUT, written_1h_tokens=held,
                                write_1h_per_mtok=2 * P_IN)
    five = billed_nano(model, Usage(held, 100, cache_write_tokens=held))
    assert ceiling.cost == (hour if backend == "anthropic" else five)


if __name__ == "__main__":      # the scripted upstream, for run_upstream
    web.run_app(upstream_app(), host="127.0.0.1", port=int(sys.argv[1]), print=None)

"""Issue 20: what a request is billed never passes what it reserved, and both count
every answer it asked for.

A real gateway in front of the real simulator; the books are read from the
real Redis through ``GET /v1/usage``. Every money assertion is exact: equal
to price × the usage billed, to the nano-dollar.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from budget.nanousd import cost_nanousd
from tests.support import OTHER_KEY, TEST_KEY, Gateway, base_config, run_gateway

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
AUTH = {"authorization": f"Bearer {TEST_KEY}"}
PRICE_IN, PRICE_OUT = 1.0, 2.0          # the fault models'; fast is 0.2 / 0.4


@pytest.fixture(scope="module")
def gw(sim_url: str):
    config = base_config(sim_url)
    config["models"] += [
        {"name": name, "backend": "openai_compat", "base_url": sim_url, "upstream_model": name,
         "price": {"input_per_mtok": PRICE_IN, "output_per_mtok": PRICE_OUT},
         "max_output_tokens": 64}
        for name in ("huge-prompt", "overflow-usage", "endless", "huge-usage", "negative-usage")]
    config["teams"][1]["allowed_models"] = ["fast"]
    with run_gateway(config) as gateway:
        yield gateway


def usage(gw: Gateway, key: str = TEST_KEY) -> dict:
    r = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()


def rows(gw: Gateway) -> dict[str, dict]:
    return {row["model"]: row for row in usage(gw)["ledger"]}


def post(gw: Gateway, body: dict, key: str = TEST_KEY) -> httpx.Response:
    return httpx.post(gw.base_url + "/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {key}"})


def delta(before: dict[str, dict], after: dict[str, dict], model: str) -> dict[str, int]:
    old = before.get(model, {})
    return {k: after[model][k] - old.get(k, 0)
            for k in ("requests", "input_tokens", "output_tokens", "cost_nanousd")}


def event(gw: Gateway, request_id: str) -> dict:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for line in gw.log().splitlines():
            if request_id in line and "request.completed" in line:
                return json.loads(line[line.index("{"):])
        time.sleep(0.05)
    raise AssertionError(f"no request.completed event for {request_id}")


@pytest.mark.parametrize("stream", [False, True])
def test_n_answers_are_billed_as_n_answers(gw: Gateway, stream: bool) -> None:
    before = rows(gw)
    body: dict[str, Any] = {"model": "fast", "messages": HELLO, "max_tokens": 20, "n": 10}
    if not stream:
        r = post(gw, body)
        assert r.status_code == 200, r.text
        assert len(r.json()["choices"]) == 10
        billed = r.json()["usage"]
    else:
        client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0)
        chunks = list(client.chat.completions.create(
            **body, stream=True, stream_options={"include_usage": True}))
        assert {c.choices[0].index for c in chunks if c.choices} == set(range(10))
        last = chunks[-1].usage
        assert last is not None
        billed = {"prompt_tokens": last.prompt_tokens, "completion_tokens": last.completion_tokens}
    # Ten answers of up to 20 tokens: far more than one answer's 20 (the old clamp).
    assert 20 < billed["completion_tokens"] <= 200
    d = delta(before, rows(gw), "fast")
    assert (d["input_tokens"], d["output_tokens"]) == (billed["prompt_tokens"],
                                                       billed["completion_tokens"])
    assert d["cost_nanousd"] == cost_nanousd(billed["prompt_tokens"], billed["completion_tokens"],
                                             0.2, 0.4)


def test_n_is_reserved_as_n_answers(sim_url: str) -> None:
    """50 answers of 20 tokens cost 1,000 output tokens: $0.0004 at fast's price.
    A team with $0.0002 left can afford one answer, never fifty."""
    config = base_config(sim_url)
    config["teams"][0]["budget"] = {"daily_hard_usd": 0.0002}
    with run_gateway(config) as gw:
        r = post(gw, {"model": "fast", "messages": HELLO, "max_tokens": 20, "n": 50})
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "insufficient_quota"
        assert post(gw, {"model": "fast", "messages": HELLO, "max_tokens": 20}).status_code == 200
        r = post(gw, {"model": "fast", "messages": HELLO, "n": 129})
        assert r.status_code == 400 and r.json()["error"]["param"] == "n"


def test_an_over_reported_prompt_is_billed_up_to_the_context_window(sim_url: str) -> None:
    """The upstream says 10,000,000 prompt tokens ($10 at this price) for "hi": billed
    at what the model can read (its context window, 8,192), an overdraft past the
    reservation, far under the team's $0.05 hard limit; never at our own estimate."""
    config = base_config(sim_url)
    config["models"].append({"name": "huge-prompt", "backend": "openai_compat",
                             "base_url": sim_url, "upstream_model": "huge-prompt",
                             "price": {"input_per_mtok": PRICE_IN, "output_per_mtok": PRICE_OUT}})
    config["teams"][0]["budget"] = {"daily_hard_usd": 0.05}
    with run_gateway(config) as gw:
        r = post(gw, {"model": "huge-prompt", "messages": HELLO, "max_tokens": 10})
        assert r.status_code == 200, r.text
        told = r.json()["usage"]           # the client is told what it is billed
        assert (told["prompt_tokens"], told["completion_tokens"]) == (8192, 5)
        book = usage(gw)
        row = {x["model"]: x for x in book["ledger"]}["huge-prompt"]
        assert (row["input_tokens"], row["output_tokens"]) == (8192, 5)
        assert book["spent_today_nanousd"] == row["cost_nanousd"] == cost_nanousd(
            8192, 5, PRICE_IN, PRICE_OUT)
        logged = event(gw, r.headers["x-routegate-request-id"])
        assert logged["usage_anomaly"] == "over_cap"
        assert logged["overdraft_usd"] > 0


@pytest.mark.parametrize("stream", [False, True])
def test_usage_past_64_bits_is_an_anomaly_not_an_outage(gw: Gateway, stream: bool) -> None:
    before = rows(gw)
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    r = post(gw, {"model": "overflow-usage", "messages": HELLO, "max_tokens": 8, **extra})
    assert r.status_code == 200, r.text
    # Every team goes on being served at once: nobody reads the refused number as Redis down.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda i: post(
            gw, {"model": "fast", "messages": HELLO, "max_tokens": 3},
            key=(TEST_KEY, OTHER_KEY)[i % 2]).status_code, range(16)))
    assert statuses == [200] * 16
    logged = event(gw, r.headers["x-routegate-request-id"])     # the log line is written
    assert logged["usage_anomaly"] == "over_cap"
    d = delta(before, rows(gw), "overflow-usage")
    assert d["output_tokens"] == 8            # clamped to max_tokens
    assert d["input_tokens"] == 8192          # clamped to what the model can read
    assert d["cost_nanousd"] == cost_nanousd(d["input_tokens"], 8, PRICE_IN, PRICE_OUT)
    assert logged["cost_usd"] == d["cost_nanousd"] / 1e9
    metrics = httpx.get(gw.url + "/metrics").text
    line = next(x for x in metrics.splitlines() if x.startswith("routegate_cost_usd_total{")
                and 'model="overflow-usage"' in x)
    assert float(line.rsplit(" ", 1)[1]) < 0.1        # 8,192 prompt tokens or two: not 1e22


def test_an_endless_stream_is_cut_and_billed_for_its_cap(gw: Gateway) -> None:
    before = rows(gw)
    client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)
    started, received = time.monotonic(), 0
    with pytest.raises(openai.APIError, match="ran past"):
        for chunk in client.chat.completions.create(model="endless", messages=HELLO,
                                                    max_tokens=10, stream=True):
            received += bool(chunk.choices and chunk.choices[0].delta.content)
    assert time.monotonic() - started < 10
    assert 10 < received < 200               # cut at the cap: 10 tokens plus the framing slack
    d = delta(before, rows(gw), "endless")
    assert (d["requests"], d["output_tokens"]) == (1, 10)        # never more than max_tokens
    assert d["cost_nanousd"] == cost_nanousd(d["input_tokens"], 10, PRICE_IN, PRICE_OUT)


@pytest.mark.parametrize("stream", [False, True])
def test_refused_usage_is_billed_at_its_bound_or_our_count(gw: Gateway, stream: bool) -> None:
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    before = rows(gw)
    r = post(gw, {"model": "huge-usage", "messages": HELLO, "max_tokens": 50, **extra})
    assert r.status_code == 200, r.text
    d = delta(before, rows(gw), "huge-usage")
    assert (d["input_tokens"], d["output_tokens"]) == (10, 50)   # its prompt; the bound exactly
    assert d["cost_nanousd"] == cost_nanousd(10, 50, PRICE_IN, PRICE_OUT)
    before = rows(gw)
    r = post(gw, {"model": "negative-usage", "messages": HELLO, "max_tokens": 50, **extra})
    assert r.status_code == 200, r.text
    d = delta(before, rows(gw), "negative-usage")
    logged = event(gw, r.headers["x-routegate-request-id"])
    assert logged["usage_anomaly"] == "negative" and logged["usage_estimated"] is True
    assert (d["input_tokens"], d["output_tokens"]) == (logged["prompt_tokens"],
                                                       logged["completion_tokens"])
    assert d["cost_nanousd"] == cost_nanousd(d["input_tokens"], d["output_tokens"],
                                             PRICE_IN, PRICE_OUT)
    if not stream:    # our own count of what it answered, and the client is told the same
        assert r.json()["usage"]["completion_tokens"] == d["output_tokens"] > 0


@pytest.mark.parametrize("field,value,param", [
    ("tool_choice", {"type": "function", "function": "f"}, "tool_choice"),
    ("response_format", {"type": "json_schema", "json_schema": [1]}, "response_format"),
    ("tools", ["x"], "tools[0]"),
])
def test_malformed_structured_fields_are_refused_before_any_upstream_call(
        gw: Gateway, sim_url: str, field: str, value: object, param: str) -> None:
    stats = sim_url.removesuffix("/v1") + "/sim/stats"
    sent = httpx.get(stats).json()["default"]["requests"]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {"model": "fast", "messages": HELLO, "tools": tools, field: value}
    r = post(gw, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"].startswith(param)
    assert httpx.get(stats).json()["default"]["requests"] == sent

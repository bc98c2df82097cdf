"""Issue 7: no client can be served without paying, and no input answers 5xx.

Each test runs a real gateway and a real simulator, and reads the books from
the real Redis through ``GET /v1/usage``.
"""

from __future__ import annotations

import concurrent.futures
import json
import time

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from budget.nanousd import cost_nanousd
from classifiers.length import counter_for
from tests.support import TEST_KEY, Gateway, base_config, clear_of_minute_turn, run_gateway

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
AUTH = {"authorization": f"Bearer {TEST_KEY}"}


def usage(gw: Gateway) -> dict:
    r = httpx.get(gw.base_url + "/usage", headers=AUTH)
    assert r.status_code == 200, r.text
    return r.json()


def ledger(gw: Gateway) -> dict[str, dict]:
    return {row["model"]: row for row in usage(gw)["ledger"]}


def post(gw: Gateway, body: dict, **headers: str) -> httpx.Response:
    return httpx.post(gw.base_url + "/chat/completions", json=body,
                      headers={**AUTH, **headers}, timeout=30)


@pytest.fixture(scope="module")
def money_gateway(sim_url: str):
    config = base_config(sim_url)
    config["models"] += [
        {"name": name, "backend": "openai_compat", "base_url": sim_url, "upstream_model": name,
         "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}, "max_output_tokens": 64}
        for name in ("no-usage", "negative-usage", "huge-usage", "unreadable-usage", "no-done",
                     "status-429", "status-400", "status-401")]
    with run_gateway(config) as gw:
        yield gw


def expected_cost(body: dict, price_in: float = 0.2, price_out: float = 0.4) -> int:
    u = body["usage"]
    return cost_nanousd(u["prompt_tokens"], u["completion_tokens"], price_in, price_out)


def test_a_reused_request_id_is_billed_every_time(money_gateway: Gateway) -> None:
    before = usage(money_gateway)["spent_today_nanousd"]
    expected = 0
    for _ in range(10):
        r = post(money_gateway, {"model": "fast", "messages": HELLO, "max_tokens": 20},
                 **{"x-request-id": "trace-123"})
        assert r.status_code == 200, r.text
        assert r.headers["x-request-id"] == "trace-123"          # echoed
        assert r.headers["x-routegate-request-id"].startswith("req_")
        expected += expected_cost(r.json())
    assert usage(money_gateway)["spent_today_nanousd"] - before == expected


def test_a_reused_request_id_does_not_pass_rpm(sim_url: str) -> None:
    config = base_config(sim_url)
    config["teams"][0]["budget"] = {"rpm": 40}
    body = {"model": "fast", "messages": HELLO, "max_tokens": 5}
    with run_gateway(config) as gw, concurrent.futures.ThreadPoolExecutor(16) as pool:
        clear_of_minute_turn(20)
        statuses = list(pool.map(lambda _: post(gw, body, **{
            "x-request-id": "same-id"}).status_code, range(120)))
    # rpm 40 (sliding): at most 40 of 120 pass within the minute, however ids repeat.
    assert statuses.count(200) <= 40
    assert statuses.count(429) >= 80


def test_concurrent_reused_ids_bill_like_unique_ids(sim_url: str) -> None:
    config = base_config(sim_url)
    config["teams"][0]["budget"] = {"daily_hard_usd": 0.0005}
    with run_gateway(config) as gw:
        body = {"model": "fast", "messages": HELLO, "max_tokens": 100, "stream": True,
                "stream_options": {"include_usage": True}}

        def one(_: int) -> int:
            cost = 0
            with httpx.stream("POST", gw.base_url + "/chat/completions", json=body, timeout=30,
                              headers={**AUTH, "x-request-id": "shared"}) as r:
                if r.status_code != 200:
                    return 0
                for line in r.iter_lines():
                    if '"usage":{' in line:
                        cost = expected_cost(json.loads(line[6:]))
            return cost

        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            served = sum(pool.map(one, range(100)))
        spent = usage(gw)["spent_today_nanousd"]
        assert spent == served
        assert spent <= 500_000


def test_the_ledger_files_a_fallback_under_the_model_that_answered(sim_url: str) -> None:
    config = base_config(sim_url, routing={"auto_policy": "cheapest", "fallback": True})
    config["models"][2]["price"] = {"input_per_mtok": 0.01, "output_per_mtok": 0.01}  # broken
    config["teams"][0]["allowed_models"] = ["broken", "fast"]
    with run_gateway(config) as gw:
        r = post(gw, {"model": "auto", "messages": HELLO, "max_tokens": 10})
        assert r.status_code == 200, r.text
        assert r.headers["x-routegate-model"] == "fast"
        assert r.headers["x-routegate-attempts"] == "broken:upstream_error,fast:ok"
        rows = ledger(gw)
        assert "broken" not in rows
        assert rows["fast"]["cost_nanousd"] == expected_cost(r.json())


def test_a_non_stream_without_usage_is_billed_from_the_tokenizer(money_gateway: Gateway) -> None:
    r = post(money_gateway, {"model": "no-usage", "messages": HELLO, "max_tokens": 30})
    assert r.status_code == 200, r.text
    assert "usage" not in r.json()
    counter = counter_for("o200k_base")
    billed = (counter.count_messages(HELLO),
              min(30, counter.count_text(r.json()["choices"][0]["message"]["content"])))
    row = ledger(money_gateway)["no-usage"]
    assert (row["input_tokens"], row["output_tokens"]) == billed
    assert row["cost_nanousd"] == cost_nanousd(*billed, 1.0, 2.0)
    assert '"usage_estimated":true' in _event(money_gateway, r)


@pytest.mark.parametrize("stream", [False, True])
def test_unreadable_usage_is_an_anomaly_and_the_client_sees_what_is_billed(
        money_gateway: Gateway, stream: bool) -> None:
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    before = ledger(money_gateway).get("unreadable-usage", {"input_tokens": 0,
                                                             "output_tokens": 0})
    r = post(money_gateway, {"model": "unreadable-usage", "messages": HELLO, "max_tokens": 20,
                             **extra})
    assert r.status_code == 200, r.text
    if stream:
        events = [json.loads(line[6:]) for line in r.text.splitlines()
                  if line.startswith("data: {")]
        shown = next(e["usage"] for e in events if e.get("usage"))
        text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    else:
        shown, text = r.json()["usage"], r.json()["choices"][0]["message"]["content"]
    counter = counter_for("o200k_base")
    # Our own count, within the output cap (a word the simulator sends may be two tokens).
    billed = (counter.count_messages(HELLO), min(20, counter.count_text(text)))
    assert (shown["prompt_tokens"], shown["completion_tokens"]) == billed
    row = ledger(money_gateway)["unreadable-usage"]
    assert (row["input_tokens"] - before["input_tokens"],
            row["output_tokens"] - before["output_tokens"]) == billed
    logged = json.loads(_event(money_gateway, r)[_event(money_gateway, r).index("{"):])
    assert logged["usage_anomaly"] == "unreadable"


def _event(gw: Gateway, r: httpx.Response) -> str:
    rid = r.headers["x-routegate-request-id"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [line for line in gw.log().splitlines()
                 if rid in line and "request.completed" in line]
        if lines:
            return lines[-1]
        time.sleep(0.05)
    raise AssertionError(f"no request.completed event for {rid}")


@pytest.mark.parametrize("stream", [False, True])
def test_negative_usage_is_refused_and_huge_usage_clamped(money_gateway: Gateway,
                                                          stream: bool) -> None:
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    for model, anomaly in (("negative-usage", "negative"), ("huge-usage", "over_cap")):
        before = ledger(money_gateway).get(model, {"input_tokens": 0, "output_tokens": 0,
                                                   "cost_nanousd": 0})
        r = post(money_gateway, {"model": model, "messages": HELLO, "max_tokens": 50, **extra})
        assert r.status_code == 200, r.text
        row = ledger(money_gateway)[model]
        tokens_in = row["input_tokens"] - before["input_tokens"]
        tokens_out = row["output_tokens"] - before["output_tokens"]
        logged = json.loads(_event(money_gateway, r)[_event(money_gateway, r).index("{"):])
        assert logged["usage_anomaly"] == anomaly
        if model == "huge-usage":      # its 10 prompt tokens; completion clamped to max_tokens
            assert (tokens_in, tokens_out) == (10, 50)
        else:                          # our own count: the prompt, and the answer we relayed
            assert (tokens_in, tokens_out) == (logged["prompt_tokens"], logged["completion_tokens"])
            assert tokens_in == counter_for("o200k_base").count_messages(HELLO)
            assert 0 < tokens_out <= 50
        assert row["cost_nanousd"] - before["cost_nanousd"] == cost_nanousd(
            tokens_in, tokens_out, 1.0, 2.0)
    metrics = httpx.get(money_gateway.url + "/metrics").text
    assert 'routegate_usage_anomalies_total{kind="over_cap"' in metrics


def test_a_stream_without_done_ends_with_an_error_event(money_gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=money_gateway.base_url, api_key=TEST_KEY, max_retries=0)
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(model="no-done", messages=HELLO, max_tokens=20,
                                                stream=True):
            pass
    assert ledger(money_gateway)["no-done"]["output_tokens"] > 0   # what was relayed is billed


def test_deeply_nested_json_is_a_400(money_gateway: Gateway) -> None:
    deep = "[" * 1000 + '"x"' + "]" * 1000          # json.dumps itself would recurse too deep
    hello = '[{"role": "user", "content": "hi"}]'
    bodies = ['{"model": "auto", "messages": [{"role": "user", "content": ' + deep + "}]}",
              '{"model": "fast", "messages": ' + hello + ', "metadata_x": ' + deep + "}",
              '{"model": "fast", "messages": ' + hello + ', "metadata_x": '
              + "[" * 300 + "1" + "]" * 300 + "}",
              '{"model": "auto", "messages": [{"role": "user", "content": {"a": ' + deep + "}}]}"]
    for body in bodies:
        r = httpx.post(money_gateway.base_url + "/chat/completions", content=body.encode(),
                       headers={**AUTH, "content-type": "application/json"}, timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["type"] == "invalid_request_error"


def test_upstream_statuses_reach_the_client_mapped(money_gateway: Gateway) -> None:
    r = post(money_gateway, {"model": "status-429", "messages": HELLO})
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    r = post(money_gateway, {"model": "status-400", "messages": HELLO})
    assert r.status_code == 400
    assert "upstream says no" in r.json()["error"]["message"]
    assert "sk-live-" not in r.text
    r = post(money_gateway, {"model": "status-401", "messages": HELLO})
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_auth"
    assert "sk-live-" not in r.text


def _slow_idle(stats_url: str, within_s: float = 60.0) -> dict:
    """The shared simulator's ``slow`` counters once nothing runs or waits there: the
    session's other gateways (batch tests' lines on ``slowpoke``) may still be at work,
    and would both fill its queue and move its counters."""
    deadline = time.monotonic() + within_s
    while True:
        stats = httpx.get(stats_url).json()["slow"]
        if (stats["running"] == 0 and stats["queued"] == 0) or time.monotonic() > deadline:
            return stats
        time.sleep(0.2)


def test_a_client_leaving_a_non_stream_cancels_the_upstream(gateway: Gateway,
                                                            sim_url: str) -> None:
    stats_url = sim_url.removesuffix("/v1") + "/sim/stats"
    before = _slow_idle(stats_url)
    books = ledger(gateway).get("slowpoke", {})
    body = {"model": "slowpoke", "messages": HELLO, "max_tokens": 200}
    try:
        r = httpx.post(gateway.base_url + "/chat/completions", json=body, headers=AUTH,
                       timeout=1.0)
    except httpx.ReadTimeout:
        pass
    else:
        pytest.fail(f"answered before the client left: {r.status_code} {r.text[:300]}")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        after = httpx.get(stats_url).json()["slow"]
        if after["cancelled"] > before["cancelled"]:
            break
        time.sleep(0.1)
    assert after["cancelled"] == before["cancelled"] + 1
    assert after["completed"] == before["completed"]
    # It read the prompt: that is billed, at our own count, and nothing more.
    prompt = counter_for("o200k_base").count_messages(HELLO)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and ledger(gateway).get("slowpoke", {}).get(
            "requests", 0) == books.get("requests", 0):
        time.sleep(0.05)
    row = ledger(gateway)["slowpoke"]
    assert row["requests"] - books.get("requests", 0) == 1
    assert (row["input_tokens"] - books.get("input_tokens", 0),
            row["output_tokens"] - books.get("output_tokens", 0)) == (prompt, 0)
    assert row["cost_nanousd"] - books.get("cost_nanousd", 0) == cost_nanousd(prompt, 0, 50.0, 100.0)


def test_a_client_leaving_mid_stream_is_logged_as_499(gateway: Gateway) -> None:
    body = {"model": "slowpoke", "messages": HELLO, "max_tokens": 200, "stream": True}
    with httpx.stream("POST", gateway.base_url + "/chat/completions", json=body, headers=AUTH,
                      timeout=30) as r:
        rid = r.headers["x-routegate-request-id"]
        lines = r.iter_lines()
        for _ in range(4):
            next(lines)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        events = [line for line in gateway.log().splitlines()
                  if rid in line and "request.completed" in line]
        if events:
            break
        time.sleep(0.05)
    assert '"status":499' in events[-1]

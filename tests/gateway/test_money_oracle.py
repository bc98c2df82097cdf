"""Money against an independent count: what each door bills equals what an honest upstream counted.

The simulator here (``sim/count.py``) counts every prompt it receives
from the raw request, with its own tokenizer and template: the messages, the
tool definitions, the response schema and the images by OpenAI's tile rule.
``GET /sim/requests`` lists what it counted per request. Every test sends
requests that carry 50 tools, a 200-field json_schema and a 2048 x 2048 image
(where the door can carry them), and asserts, to the nano-dollar, that the
team's spend in Redis equals the sum over the simulator's own records of
prompt x input price + completion x output price. On the main of before
money round 3 these failed: the tools and schema went unbilled.
"""

from __future__ import annotations

import base64
import io
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from PIL import Image

from budget.nanousd import cost_nanousd
from tests.support import OTHER_KEY, TEST_KEY, Gateway, hashed, run_gateway, run_simulator

PRICE_IN, PRICE_OUT = 1.0, 2.0
BATCH_RATE = 0.5
LIMIT_USD = 0.10


def png_data_url(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (40, 90, 160)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


IMAGE = png_data_url(2048, 2048)


def tool(i: int) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": f"lookup_record_{i}", "description": f"Look up record kind {i} by its fields.",
        "parameters": {"type": "object", "required": ["id"], "properties": {
            "id": {"type": "string", "description": "The record's identifier."},
            "region": {"type": "string", "enum": ["eu", "us", "apac"]},
            "limit": {"type": "integer", "description": "How many rows at most."},
            "tags": {"type": "array", "items": {"type": "string"}}}}}}


TOOLS: Any = [tool(i) for i in range(50)]     # Any: the SDKs' own param types
SCHEMA: Any = {"type": "json_schema", "json_schema": {"name": "report", "schema": {
    "type": "object", "additionalProperties": False,
    "required": [f"field_{i}" for i in range(200)],
    "properties": {f"field_{i}": {"type": "string", "description": f"Part {i} of the report."}
                   for i in range(200)}}}}


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with run_simulator("--tpot-ms", "1", "--prefill", "1000000", "--output-mean", "12") as url:
        yield url


@pytest.fixture(scope="module")
def gw(sim: str) -> Iterator[Gateway]:
    model = {"backend": "openai_compat", "base_url": sim, "upstream_model": "default",
             "price": {"input_per_mtok": PRICE_IN, "output_per_mtok": PRICE_OUT},
             "context_window": 128000, "max_output_tokens": 64}
    config = {
        "models": [{"name": "m", **model},
                   {"name": "emb", "kind": "embedding", **model}],
        "teams": [{"name": "t", "keys": [hashed(TEST_KEY)]},
                  {"name": "capped", "keys": [hashed(OTHER_KEY)],
                   "budget": {"daily_hard_usd": LIMIT_USD}}],
        "redis_url": "redis://127.0.0.1:6379/0",
        "routing": {"auto_policy": "cheapest"},
        "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
        "batch": {"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}", "poll_interval_s": 0.05,
                  "claim_interval_s": 0.5},
        "pools": {"batch": {"price_multiplier": BATCH_RATE}},
        "max_body_bytes": 4 * 1024 * 1024,
    }
    with run_gateway(config) as gateway:
        yield gateway


def counted(sim: str) -> list[dict[str, Any]]:
    return httpx.get(sim.removesuffix("/v1") + "/sim/requests").json()


def spent(gw: Gateway) -> int:
    r = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {TEST_KEY}"})
    assert r.status_code == 200, r.text
    return int(r.json()["spent_today_nanousd"])


def honest_bill(rows: list[dict[str, Any]], rate: float = 1.0) -> int:
    return sum(cost_nanousd(r["prompt_tokens"], r["completion_tokens"], PRICE_IN * rate,
                            PRICE_OUT * rate) for r in rows)


def settled(gw: Gateway, sim: str, before: tuple[int, int], n: int, rate: float = 1.0
            ) -> tuple[int, int, list[dict[str, Any]]]:
    """(the team's spend since ``before``, the honest bill of the simulator's ``n`` new
    records), once both are in (a settle is queued after the answer is sent)."""
    deadline = time.monotonic() + 10
    while True:
        rows = counted(sim)[before[1]:]
        bill, now = honest_bill(rows, rate), spent(gw) - before[0]
        if (len(rows) >= n and now == bill) or time.monotonic() > deadline:
            return now, bill, rows
        time.sleep(0.05)


def mark(gw: Gateway, sim: str) -> tuple[int, int]:
    return spent(gw), len(counted(sim))


def oai(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)


def chat_messages() -> Any:
    return [{"role": "system", "content": "You answer with the tools or the report format."},
            {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"},
                                         {"type": "image_url", "image_url": {"url": IMAGE}}]}]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_bills_tools_schema_and_image_as_the_upstream_counts(gw: Gateway, sim: str,
                                                                  stream: bool) -> None:
    before = mark(gw, sim)
    client = oai(gw)
    for extra in ({"tools": TOOLS}, {"response_format": SCHEMA}, {}):
        if stream:
            for _ in client.chat.completions.create(model="m", messages=chat_messages(),
                                                    max_tokens=20, stream=True, **extra):
                pass
        else:
            client.chat.completions.create(model="m", messages=chat_messages(), max_tokens=20,
                                           **extra)
    now, bill, rows = settled(gw, sim, before, 3)
    assert len(rows) == 3
    # The tools alone are thousands of tokens, the image 765: all of it billed.
    assert min(r["prompt_tokens"] for r in rows) > 765
    assert max(r["prompt_tokens"] for r in rows) > 3000
    assert now == bill


@pytest.mark.parametrize("stream", [False, True])
def test_responses_bills_tools_schema_and_image_as_the_upstream_counts(gw: Gateway, sim: str,
                                                                       stream: bool) -> None:
    before = mark(gw, sim)
    tools = [{"type": "function", "name": t["function"]["name"],
              "description": t["function"]["description"],
              "parameters": t["function"]["parameters"]} for t in TOOLS]
    fmt = {"format": {"type": "json_schema", "name": "report",
                      "schema": SCHEMA["json_schema"]["schema"]}}
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Describe it."},
                                          {"type": "input_image", "image_url": IMAGE}]}]
    for extra in ({"tools": tools}, {"text": fmt}):
        r = httpx.post(gw.base_url + "/responses", timeout=30,
                       headers={"authorization": f"Bearer {TEST_KEY}"},
                       json={"model": "m", "input": items, "max_output_tokens": 20,
                             "stream": stream, "store": False, **extra})
        assert r.status_code == 200, r.text
    now, bill, rows = settled(gw, sim, before, 2)
    assert len(rows) == 2 and max(r["prompt_tokens"] for r in rows) > 3000
    assert now == bill


@pytest.mark.parametrize("stream", [False, True])
def test_messages_bills_tools_and_image_as_the_upstream_counts(gw: Gateway, sim: str,
                                                               stream: bool) -> None:
    before = mark(gw, sim)
    claude = anthropic.Anthropic(base_url=gw.url, api_key=TEST_KEY, max_retries=0)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    content = [{"type": "text", "text": "What is this?"},
               {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                            "data": IMAGE.partition(",")[2]}}]
    kwargs: dict[str, Any] = {"model": "m", "max_tokens": 20, "tools": tools, "system": "Be brief.",
                              "messages": [{"role": "user", "content": content}]}
    if stream:
        with claude.messages.stream(**kwargs) as events:
            final = events.get_final_message()
    else:
        final = claude.messages.create(**kwargs)
    now, bill, rows = settled(gw, sim, before, 1)
    assert len(rows) == 1 and rows[0]["prompt_tokens"] > 3000
    assert now == bill
    # Shown what is billed: Anthropic's input_tokens leave the cache's reads out.
    shown = final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)
    assert shown == rows[0]["prompt_tokens"]


def test_completions_and_embeddings_bill_as_the_upstream_counts(gw: Gateway, sim: str) -> None:
    before = mark(gw, sim)
    client = oai(gw)
    client.completions.create(model="m", prompt=["Once upon a time", "The end of the"],
                              max_tokens=10)
    client.embeddings.create(model="emb", input=["a first text to embed", "and a second"])
    now, bill, rows = settled(gw, sim, before, 2)
    assert len(rows) == 2
    assert now == bill


def test_a_batch_line_bills_as_the_upstream_counts(gw: Gateway, sim: str) -> None:
    before = mark(gw, sim)
    client = oai(gw)
    line = {"custom_id": "agent-1", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "m", "max_tokens": 20, "messages": chat_messages(), "tools": TOOLS}}
    upload = client.files.create(file=("in.jsonl", io.BytesIO(orjson.dumps(line) + b"\n")),
                                 purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    deadline = time.monotonic() + 60
    while client.batches.retrieve(batch.id).status not in ("completed", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    now, bill, rows = settled(gw, sim, before, 1, rate=BATCH_RATE)
    assert len(rows) == 1 and rows[0]["prompt_tokens"] > 3000
    assert now == bill


def requests_refused(gw: Gateway, team: str) -> float:
    metrics = httpx.get(gw.url + "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("routegate_requests_total{") and f'team="{team}"' in line
               and 'status="429"' in line)


def test_a_hard_limit_holds_against_what_the_upstream_consumed(gw: Gateway, sim: str) -> None:
    """40 tool-laden requests from a team with a $0.10 hard limit: the upstream
    consumes at most $0.10 plus one request's worth, by its own count."""
    before = len(counted(sim))
    client = openai.OpenAI(base_url=gw.base_url, api_key=OTHER_KEY, max_retries=0, timeout=30)
    refused = 0
    for _ in range(40):
        try:
            client.chat.completions.create(model="m", messages=chat_messages(), tools=TOOLS,
                                           max_tokens=20)
        except openai.RateLimitError as exc:
            assert exc.code == "insufficient_quota"
            assert exc.response.headers["x-should-retry"] == "false"
            refused += 1
    rows = counted(sim)[before:]
    consumed, one = honest_bill(rows), max(honest_bill([r]) for r in rows)
    assert refused > 0
    assert consumed <= LIMIT_USD * 1e9 + one
    assert spent_by(gw, OTHER_KEY) == consumed      # and every token of it was billed


def spent_by(gw: Gateway, key: str) -> int:
    deadline = time.monotonic() + 5
    while True:
        r = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {key}"})
        ledger = sum(int(x["cost_nanousd"]) for x in r.json()["ledger"])
        if ledger == int(r.json()["spent_today_nanousd"]) or time.monotonic() > deadline:
            return int(r.json()["spent_today_nanousd"])
        time.sleep(0.05)


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_hard_budget_refusal_is_not_retried_by_the_sdks(gw: Gateway, sdk: str) -> None:
    """Both SDKs honour x-should-retry: false, so a refusal is one request, not three."""
    bare = openai.OpenAI(base_url=gw.base_url, api_key=OTHER_KEY, max_retries=0, timeout=30)
    for _ in range(60):                # the team spends to its limit (if not already there)
        try:
            bare.chat.completions.create(model="m", messages=chat_messages(), tools=TOOLS,
                                         max_tokens=20)
        except openai.RateLimitError:
            break
    time.sleep(1.2)                    # the metrics flush within a second (FLUSH_S)
    refused = requests_refused(gw, "capped")
    if sdk == "openai":
        client = openai.OpenAI(base_url=gw.base_url, api_key=OTHER_KEY, timeout=30)  # 2 retries
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="m", messages=chat_messages(), tools=TOOLS,
                                           max_tokens=20)
    else:
        claude = anthropic.Anthropic(base_url=gw.url, api_key=OTHER_KEY)          # 2 retries
        with pytest.raises(anthropic.RateLimitError):
            tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
                     for t in TOOLS]
            claude.messages.create(model="m", max_tokens=20, tools=tools,   # type: ignore[arg-type]
                                   messages=[{"role": "user", "content": "hi"}])
    time.sleep(1.2)          # the SDK made its retries, if any, before raising; metrics flush
    assert requests_refused(gw, "capped") == refused + 1


def test_shadow_spend_stays_within_its_stated_bound_by_the_upstreams_count() -> None:
    """Shadows re-send the served request's tools to the shadow model. By the
    simulator's own count, what they consumed stays within the bound the shadow
    docstring states: rate x the served traffic at the shadow's prices, plus one
    shadow's worst case (at the batch price)."""
    rate, cheap, dear = 0.5, (0.2, 0.4), (2.0, 4.0)
    with run_simulator("--tpot-ms", "1", "--prefill", "1000000", "--output-mean", "12") as url:
        def model(name: str, price: tuple[float, float]) -> dict[str, Any]:
            return {"name": name, "backend": "openai_compat", "base_url": url,
                    "upstream_model": f"{name}-up", "context_window": 128000,
                    "price": {"input_per_mtok": price[0], "output_per_mtok": price[1]}}
        config = {"models": [model("small", cheap), model("large", dear)],
                  "teams": [{"name": "t", "keys": [hashed(TEST_KEY)],
                             "shadow": {"rate": rate, "model": "large"}}],
                  "redis_url": "redis://127.0.0.1:6379/0", "routing": {"auto_policy": "cheapest"},
                  "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
                  "batch": {"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}"},
                  "max_body_bytes": 4 * 1024 * 1024}
        with run_gateway(config) as gw:
            client = oai(gw)
            for i in range(12):
                client.chat.completions.create(model="auto", tools=TOOLS, max_tokens=24,
                                               messages=[{"role": "user",
                                                          "content": f"Find record {i}."}])
            time.sleep(3)                       # the shadows run after the answers
            rows = counted(url)
    served = [r for r in rows if r["model"] == "small-up"]
    shadows = [r for r in rows if r["model"] == "large-up"]
    assert len(served) == 12 and shadows
    at_shadow_prices = sum(cost_nanousd(r["prompt_tokens"], r["completion_tokens"], *dear)
                           for r in served)
    spent_on_shadows = sum(cost_nanousd(r["prompt_tokens"], r["completion_tokens"],
                                        dear[0] * BATCH_RATE, dear[1] * BATCH_RATE)
                           for r in shadows)
    one_worst = max(cost_nanousd(r["prompt_tokens"], max(32, 2 * r["completion_tokens"]),
                                 dear[0] * BATCH_RATE, dear[1] * BATCH_RATE) for r in served)
    assert spent_on_shadows <= rate * at_shadow_prices + one_worst

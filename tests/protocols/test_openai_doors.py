"""Issue 18: embeddings, legacy completions, model aliases and the team's model list,
through the one pipeline, with the official ``openai`` SDK against a real gateway.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import time
import uuid
from typing import Any

import httpx
import openai
import pytest

from budget.nanousd import cost_nanousd
from sim.shapes import vector
from tests.support import OTHER_KEY, TEST_KEY, Gateway, base_config, run_gateway

EMBED_PRICE = 0.05
CHAT_PRICE = (0.5, 1.0)


def doors_config(sim_url: str) -> dict:
    config = base_config(sim_url)
    config["models"] += [
        {"name": "embedder", "backend": "simulated", "kind": "embedding",
         "aliases": ["text-embedding-3-small"], "max_output_tokens": 1,
         "price": {"input_per_mtok": EMBED_PRICE, "output_per_mtok": 0},
         "simulate": {"prefill_tokens_per_s": 1_000_000, "embedding_dimensions": 32}},
        {"name": "writer", "backend": "simulated", "aliases": ["gpt-4o-mini", "davinci-002"],
         "price": {"input_per_mtok": CHAT_PRICE[0], "output_per_mtok": CHAT_PRICE[1]},
         "simulate": {"tpot_ms": 1, "prefill_tokens_per_s": 1_000_000, "output_tokens_mean": 12}},
    ]
    config["teams"][1]["allowed_models"] = ["fast", "writer"]
    return config


@pytest.fixture(scope="module")
def gw(sim_url: str):
    with run_gateway(doors_config(sim_url)) as gateway:
        yield gateway


@pytest.fixture
def client(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)


def body_of(exc: openai.APIStatusError) -> dict[str, Any]:
    """The error's parsed JSON body, which must be an object."""
    assert isinstance(exc.body, dict), exc.body
    return exc.body


def spent(gw: Gateway, key: str = TEST_KEY) -> tuple[int, dict[str, dict]]:
    r = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {key}"}).json()
    return r["spent_today_nanousd"], {row["model"]: row for row in r["ledger"]}


def test_embeddings_by_alias_are_deterministic_and_billed_by_input(
        gw: Gateway, client: openai.OpenAI) -> None:
    before, rows_before = spent(gw)
    raw = client.embeddings.with_raw_response.create(model="text-embedding-3-small",
                                                     input=["routing", "budgets"])
    result = raw.parse()
    assert raw.headers["x-routegate-model"] == "embedder"
    assert [d.index for d in result.data] == [0, 1]
    assert result.data[0].embedding == pytest.approx(vector("routing", 32), abs=1e-6)
    again = client.embeddings.create(model="embedder", input="routing", dimensions=8,
                                     encoding_format="float")
    assert again.data[0].embedding == pytest.approx(vector("routing", 8), abs=1e-6)
    tokens = result.usage.prompt_tokens + again.usage.prompt_tokens
    after, rows = spent(gw)
    assert after - before == (cost_nanousd(result.usage.prompt_tokens, 0, EMBED_PRICE, 0)
                              + cost_nanousd(again.usage.prompt_tokens, 0, EMBED_PRICE, 0))
    old = rows_before.get("embedder", {"requests": 0, "input_tokens": 0, "output_tokens": 0})
    assert (rows["embedder"]["requests"] - old["requests"],
            rows["embedder"]["input_tokens"] - old["input_tokens"],
            rows["embedder"]["output_tokens"] - old["output_tokens"]) == (2, tokens, 0)


def test_base64_embeddings_pass_through(gw: Gateway) -> None:
    r = httpx.post(gw.base_url + "/embeddings", timeout=30,
                   headers={"authorization": f"Bearer {TEST_KEY}"},
                   json={"model": "embedder", "input": [[1, 2, 3]], "encoding_format": "base64"})
    assert r.status_code == 200, r.text
    packed = base64.b64decode(r.json()["data"][0]["embedding"])
    assert struct.unpack("<32f", packed) == pytest.approx(vector([1, 2, 3], 32), abs=1e-6)
    assert r.json()["usage"]["prompt_tokens"] == 3          # token ids count as given


@pytest.mark.parametrize("model,code", [("auto", "model_not_supported"),
                                        ("fast", "model_not_supported"),
                                        ("nope", "model_not_found")])
def test_embeddings_refuse_what_is_not_an_embedding_model(client: openai.OpenAI, model: str,
                                                          code: str) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        client.embeddings.create(model=model, input="x")
    assert body_of(err.value)["code"] == code


def test_an_embedding_model_serves_no_chat(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="text-embedding-3-small",
                                       messages=[{"role": "user", "content": "hi"}])
    assert body_of(err.value)["code"] == "model_not_supported"


def test_legacy_completions_plain_streamed_and_routed(gw: Gateway, client: openai.OpenAI
                                                      ) -> None:
    raw = client.completions.with_raw_response.create(model="davinci-002", prompt="Say hi",
                                                      max_tokens=8, n=2)
    answer = raw.parse()
    assert raw.headers["x-routegate-model"] == "writer"
    assert answer.object == "text_completion" and len(answer.choices) == 2
    assert all(c.text for c in answer.choices)
    assert answer.usage is not None and 0 < answer.usage.completion_tokens <= 16
    streamed = client.completions.with_raw_response.create(
        model="auto", prompt="Count to three", max_tokens=8, stream=True,
        stream_options={"include_usage": True})
    assert streamed.headers["x-routegate-reason"]            # routed, like chat
    chunks = list(streamed.parse())
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens <= 8


def test_completions_spend_is_exact(gw: Gateway, client: openai.OpenAI) -> None:
    before, _ = spent(gw)
    answer = client.completions.create(model="writer", prompt=["one", "two"], max_tokens=5)
    assert len(answer.choices) == 2
    chunks = list(client.completions.create(model="writer", prompt="three", max_tokens=5,
                                            stream=True, stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert usage is not None and answer.usage is not None
    after, _ = spent(gw)
    assert after - before == (
        cost_nanousd(answer.usage.prompt_tokens, answer.usage.completion_tokens, *CHAT_PRICE)
        + cost_nanousd(usage.prompt_tokens, usage.completion_tokens, *CHAT_PRICE))


def test_a_hard_coded_openai_name_answers(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    assert raw.headers["x-routegate-model"] == "writer"
    assert raw.parse().choices[0].message.content


def test_the_model_list_is_the_teams_own(gw: Gateway) -> None:
    mine = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0)
    other = openai.OpenAI(base_url=gw.base_url, api_key=OTHER_KEY, max_retries=0)
    ids = {m.id for m in mine.models.list()}
    assert {"auto", "fast", "writer", "gpt-4o-mini", "embedder", "text-embedding-3-small"} <= ids
    theirs = {m.id for m in other.models.list()}
    assert theirs == {"auto", "fast", "writer", "gpt-4o-mini", "davinci-002"}
    alias = other.models.retrieve("gpt-4o-mini").model_extra
    assert alias is not None and alias["alias_of"] == "writer"
    embedder = mine.models.retrieve("embedder").model_extra
    assert embedder is not None and embedder["kind"] == "embedding"
    with pytest.raises(openai.NotFoundError):
        other.models.retrieve("embedder")                  # not theirs to use
    with pytest.raises(openai.NotFoundError):
        mine.models.retrieve("no-such-model")


def test_past_the_hard_limit_every_door_says_insufficient_quota(sim_url: str) -> None:
    config = doors_config(sim_url)
    config["teams"][0]["budget"] = {"daily_hard_usd": 0.0}
    config["budget"]["key_prefix"] = f"rgtest-{uuid.uuid4().hex[:8]}"
    with run_gateway(config) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0)
        calls = [lambda: client.embeddings.create(model="embedder", input="x"),
                 lambda: client.completions.create(model="writer", prompt="x", max_tokens=3),
                 lambda: client.completions.create(model="writer", prompt="x", max_tokens=3,
                                                   stream=True)]
        for call in calls:
            with pytest.raises(openai.RateLimitError) as err:
                call()
            assert body_of(err.value)["code"] == "insufficient_quota"


@pytest.mark.parametrize("url,body,check", [
    ("/v1/embeddings", {"model": "embedder", "input": "batch me"},
     lambda b: len(b["data"][0]["embedding"]) == 32),
    ("/v1/completions", {"model": "writer", "prompt": "batch me", "max_tokens": 4},
     lambda b: b["object"] == "text_completion" and b["choices"][0]["text"]),
    ("/v1/responses", {"model": "writer", "input": "batch me", "max_output_tokens": 16},
     lambda b: b["object"] == "response" and b["output"]),
])
def test_batch_lines_for_every_openai_door(gw: Gateway, client: openai.OpenAI, url: str,
                                            body: dict, check: object) -> None:
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": url, "body": body} for i in range(3)]
    data = "\n".join(json.dumps(line) for line in lines).encode()
    upload = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint=url,  # type: ignore[arg-type]
                                  completion_window="24h")
    deadline = time.monotonic() + 30
    while batch.status not in ("completed", "failed") and time.monotonic() < deadline:
        time.sleep(0.2)
        batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    assert batch.request_counts is not None and batch.request_counts.completed == 3
    assert batch.output_file_id is not None
    out = [json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()]
    assert sorted(r["custom_id"] for r in out) == ["r0", "r1", "r2"]
    assert all(r["response"]["status_code"] == 200 and check(r["response"]["body"])  # type: ignore[operator]
               for r in out)


def test_a_batch_for_one_endpoint_refuses_a_file_for_another(gw: Gateway,
                                                             client: openai.OpenAI) -> None:
    line = {"custom_id": "a", "method": "POST", "url": "/v1/embeddings",
            "body": {"model": "embedder", "input": "x"}}
    upload = client.files.create(file=("in.jsonl", io.BytesIO(json.dumps(line).encode())),
                                 purpose="batch")
    with pytest.raises(openai.BadRequestError) as err:
        client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                              completion_window="24h")
    assert body_of(err.value)["param"] == "endpoint"

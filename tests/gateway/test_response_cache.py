"""The response cache: a repeated deterministic request answered from Redis, no upstream call.

A team opts in (``teams[].response_cache``); the simulator's own record of
the requests it took (``GET /sim/requests``) says whether a request reached
it. A hit is billed ``hit_price_fraction`` of the original's cost; streams
replay in the door's shape; ``cache-control`` skips the lookup or the write.
Two requests that could be answered differently (another quality target, a
field sent upstream) never share an entry; a hit is never of another shape
than was asked, nor from a model the caller may not use; an answer the
gateway's checks refused is not kept; the team's byte quota counts each entry
once, however often it is saved.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
import redis
import redis.asyncio as aioredis
import yaml

from budget.nanousd import cost_nanousd
from gateway.bulk import QuotaStore
from tests.providers.anthropic_server import ANTHROPIC_KEY, AnthropicServer, run_anthropic_server
from tests.support import OTHER_KEY, TEST_KEY, Gateway, hashed, run_gateway, run_simulator, sim_model

ASK: Any = [{"role": "user", "content": "Name the capital of Peru."}]
PREFIX = f"rgtest-{uuid.uuid4().hex[:8]}"
QUOTA_KEY = "sk-rcache-quota-team"
ADMIN_KEY = "rcache-admin-key-0123456789"
KEY_ENV = "ROUTEGATE_TEST_ANTHROPIC_KEY"


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with run_simulator("--tpot-ms", "1", "--prefill", "1000000", "--output-mean", "12") as url:
        yield url


@pytest.fixture(scope="module")
def claude_api() -> Iterator[AnthropicServer]:
    with run_anthropic_server() as server:
        yield server


def remote(sim: str, name: str, upstream: str) -> dict[str, Any]:
    return {"name": name, "backend": "openai_compat", "base_url": sim, "upstream_model": upstream,
            "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}


@pytest.fixture(scope="module")
def gw(sim: str, claude_api: AnthropicServer) -> Iterator[Gateway]:
    claude = {"name": "claude", "backend": "anthropic", "base_url": claude_api.url,
              "upstream_model": "claude-test", "api_key_env": KEY_ENV,
              "price": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}
    config = {"models": [remote(sim, "m", "default"), remote(sim, "echo", "echo"),
                         remote(sim, "ij", "invalid-json"), claude,
                         sim_model("cheap", 0.3, 0.1), sim_model("strong", 0.97, 5.0)],
              "teams": [{"name": "t", "keys": [hashed(TEST_KEY)],
                         "response_cache": {"ttl_s": 60}},
                        {"name": "half", "keys": [hashed(OTHER_KEY)],
                         "response_cache": {"ttl_s": 60, "hit_price_fraction": 0.5}},
                        {"name": "quota", "keys": [hashed(QUOTA_KEY)],
                         "response_cache": {"ttl_s": 60, "max_team_bytes": 8192}}],
              "routing": {"auto_policy": "quality"},
              "redis_url": "redis://127.0.0.1:6379/0",
              "budget": {"key_prefix": PREFIX},
              "batch": {"enabled": False}}
    with run_gateway(config, env={KEY_ENV: ANTHROPIC_KEY}) as gateway:
        yield gateway


def upstream_calls(sim: str) -> int:
    return len(httpx.get(sim.removesuffix("/v1") + "/sim/requests").json())


def spent(gw: Gateway, key: str = TEST_KEY) -> int:
    deadline = time.monotonic() + 3
    last = -1
    while True:        # settles are queued after the answer: wait until the figure holds
        r = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {key}"})
        now = int(r.json()["spent_today_nanousd"])
        if now == last or time.monotonic() > deadline:
            return now
        last = now
        time.sleep(0.2)


def chat(gw: Gateway, key: str = TEST_KEY, **extra: Any) -> Any:
    client = openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)
    return client.chat.completions.with_raw_response.create(
        model="m", messages=ASK, **{"temperature": 0, **extra})


def test_a_repeat_is_answered_from_the_cache_without_an_upstream_call(gw: Gateway,
                                                                       sim: str) -> None:
    first = chat(gw, max_tokens=12)
    assert first.headers["x-routegate-cache"] == "miss"
    calls, cost = upstream_calls(sim), spent(gw)
    second = chat(gw, max_tokens=12)
    assert second.headers["x-routegate-cache"] == "hit"
    assert upstream_calls(sim) == calls                        # nothing went upstream
    assert spent(gw) == cost                                   # billed 0: the default
    assert second.parse().choices[0].message.content == first.parse().choices[0].message.content
    sampled = chat(gw, max_tokens=12, temperature=0.7)        # not deterministic: not cached
    assert "x-routegate-cache" not in sampled.headers


def test_a_hit_streams_in_the_doors_shape_and_is_billed_its_fraction(gw: Gateway,
                                                                      sim: str) -> None:
    claude = anthropic.Anthropic(base_url=gw.url, api_key=OTHER_KEY, max_retries=0)
    # This SDK version has no temperature of its own: it goes as an extra field.
    kwargs: Any = {"model": "m", "max_tokens": 16, "messages": ASK,
                   "extra_body": {"temperature": 0}}
    original = claude.messages.create(**kwargs)
    cost, calls = spent(gw, OTHER_KEY), upstream_calls(sim)
    with claude.messages.stream(**kwargs) as events:
        replayed = events.get_final_message()
    assert upstream_calls(sim) == calls
    assert [b.model_dump() for b in replayed.content] == [b.model_dump() for b in original.content]
    assert spent(gw, OTHER_KEY) == cost + round(cost * 0.5)     # half of what the first cost


def test_a_hit_on_the_responses_door_is_billed_its_fraction_of_what_the_upstream_counted(
        gw: Gateway, sim: str) -> None:
    """The original billed what the simulator counted it received and generated, at the
    model's prices; the hit, nothing upstream and half of that. (Legacy completions are
    not cached: no header says so either way.)"""
    client = openai.OpenAI(base_url=gw.base_url, api_key=OTHER_KEY, max_retries=0)

    def ask() -> Any:
        return client.responses.with_raw_response.create(
            model="m", input="Name the capital of Chile.", temperature=0,
            max_output_tokens=12, store=False)

    before, seen = spent(gw, OTHER_KEY), upstream_calls(sim)
    assert ask().headers["x-routegate-cache"] == "miss"
    [row] = httpx.get(sim.removesuffix("/v1") + "/sim/requests").json()[seen:]
    counted = cost_nanousd(row["prompt_tokens"], row["completion_tokens"], 1.0, 2.0)
    assert spent(gw, OTHER_KEY) - before == counted > 0
    time.sleep(0.5)                              # the miss is stored after its answer
    assert ask().headers["x-routegate-cache"] == "hit"
    assert upstream_calls(sim) == seen + 1
    assert spent(gw, OTHER_KEY) - before == counted + round(counted * 0.5)
    legacy = client.completions.with_raw_response.create(
        model="m", prompt="Name the capital of Chile.", temperature=0, max_tokens=12)
    assert "x-routegate-cache" not in legacy.headers


def test_cache_control_skips_the_lookup_or_the_write(gw: Gateway, sim: str) -> None:
    client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0)
    ask: Any = [{"role": "user", "content": "Spell 'queue' backwards."}]
    client.chat.completions.create(model="m", messages=ask, seed=7,
                                   extra_headers={"cache-control": "no-store"})
    calls = upstream_calls(sim)
    again = client.chat.completions.with_raw_response.create(model="m", messages=ask, seed=7)
    assert again.headers["x-routegate-cache"] == "miss" and upstream_calls(sim) == calls + 1
    fresh = client.chat.completions.with_raw_response.create(
        model="m", messages=ask, seed=7, extra_headers={"cache-control": "no-cache"})
    assert fresh.headers["x-routegate-cache"] == "miss" and upstream_calls(sim) == calls + 2
    hit = client.chat.completions.with_raw_response.create(model="m", messages=ask, seed=7)
    assert hit.headers["x-routegate-cache"] == "hit" and upstream_calls(sim) == calls + 2


def post(gw: Gateway, body: dict[str, Any], key: str = TEST_KEY,
         headers: Any = ()) -> httpx.Response:
    """A raw chat request: header lines as given (repeated ones too), any field."""
    return httpx.post(gw.base_url + "/chat/completions", json=body, timeout=30,
                      headers=[("authorization", f"Bearer {key}"), *headers])


def fresh(what: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{what} {uuid.uuid4().hex}"}]


def test_another_quality_target_is_another_entry(gw: Gateway) -> None:
    body = {"model": "auto:0.05", "messages": fresh("Prove it"), "temperature": 0, "max_tokens": 8}
    low = post(gw, body)
    high = post(gw, {**body, "model": "auto:0.99"})
    assert high.headers["x-routegate-cache"] == "miss"        # not the cheap model's answer
    assert (low.headers["x-routegate-model"], high.headers["x-routegate-model"]) == ("cheap",
                                                                                     "strong")
    body = {**body, "model": "auto", "messages": fresh("Prove it")}
    post(gw, body, headers=[("x-routegate-quality", "0.05")])
    high = post(gw, body, headers=[("x-routegate-quality", "0.99")])
    assert high.headers["x-routegate-cache"] == "miss"
    assert high.headers["x-routegate-model"] == "strong"


@pytest.mark.parametrize("field,first,second", [
    ("reasoning_effort", "low", "high"),
    ("top_k", 1, 50),
    ("min_p", 0.0, 0.9),
    ("verbosity", "low", "high"),
    ("functions", None, [{"name": "f", "parameters": {"type": "object"}}]),
    ("prediction", None, {"type": "content", "content": "Lima"}),
])
def test_every_field_sent_upstream_is_in_the_key(gw: Gateway, field: str, first: Any,
                                                 second: Any) -> None:
    body: dict[str, Any] = {"model": "echo", "messages": fresh("Echo"), "temperature": 0}
    post(gw, body if first is None else {**body, field: first})
    again = post(gw, {**body, field: second})
    assert again.headers["x-routegate-cache"] == "miss"
    echoed = json.loads(again.json()["choices"][0]["message"]["content"])   # what went upstream
    assert echoed[field] == second
    other_user = post(gw, {**body, field: second, "user": "someone-else", "stream": False})
    assert other_user.headers["x-routegate-cache"] == "hit"       # who asked: the same answer


def test_an_anthropic_field_a_native_upstream_reads_is_in_the_key(
        gw: Gateway, claude_api: AnthropicServer) -> None:
    client = anthropic.Anthropic(base_url=gw.url, api_key=TEST_KEY, max_retries=0)
    kwargs: Any = {"model": "claude", "max_tokens": 16, "messages": fresh("Sample")}
    client.messages.create(**kwargs, extra_body={"temperature": 0, "top_k": 1})
    answered = len(claude_api.answered())
    client.messages.create(**kwargs, extra_body={"temperature": 0, "top_k": 50})
    assert len(claude_api.answered()) == answered + 1               # it reached the upstream
    assert claude_api.answered()[-1].body["top_k"] == 50


def test_a_streamed_answer_is_kept_only_whole(gw: Gateway) -> None:
    client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0)
    for extra in ({"n": 2}, {"logprobs": True}):       # a stream keeps one choice, no logprobs
        body: Any = {"model": "m", "messages": fresh("Two"), "temperature": 0, "max_tokens": 8,
                     **extra}
        list(client.chat.completions.create(**body, stream=True))
        again = client.chat.completions.with_raw_response.create(**body)
        assert again.headers["x-routegate-cache"] == "miss", extra
        assert len(again.parse().choices) == extra.get("n", 1)
    body = {"model": "m", "messages": fresh("One"), "temperature": 0, "max_tokens": 8}
    chunks = list(client.chat.completions.create(**body, stream=True))
    hit = client.chat.completions.with_raw_response.create(**body)
    assert hit.headers["x-routegate-cache"] == "hit"
    answer = hit.parse()      # the stream's own id, time and model, as a chat.completion
    assert (answer.id, answer.created, answer.model, answer.object) == (
        chunks[0].id, chunks[0].created, chunks[0].model, "chat.completion")
    assert answer.choices[0].message.content == "".join(
        c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_a_replayed_stream_carries_the_logprobs_asked_for(gw: Gateway) -> None:
    client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0)
    body: Any = {"model": "m", "messages": fresh("Logprobs"), "temperature": 0, "max_tokens": 8,
                 "logprobs": True}
    original = client.chat.completions.create(**body).choices[0]
    assert original.logprobs is not None and original.logprobs.content
    raw = client.chat.completions.with_raw_response.create(**body, stream=True)
    assert raw.headers["x-routegate-cache"] == "hit"
    replayed = [t for c in raw.parse() for ch in c.choices
                for t in ((ch.logprobs.content or []) if ch.logprobs else [])]
    assert replayed == original.logprobs.content


def stored_records(team: str) -> tuple[dict[Any, Any], list[int]]:
    """The team's usage counters and the sizes of the records it holds now."""
    r = redis.Redis()
    tag = "{" + PREFIX + ":" + team + "}:rcache:"
    usage = r.hgetall(tag + "usage")
    records = [k for k in r.scan_iter(tag + "*") if not k.endswith((b":index", b":sizes", b":usage"))]
    return usage, [int(r.strlen(k)) for k in records]


def test_saving_an_entry_again_counts_its_bytes_once(gw: Gateway) -> None:
    body = {"model": "m", "messages": fresh("Refresh"), "temperature": 0, "max_tokens": 4}
    for _ in range(6):       # a client that refreshes: each answer replaces the entry
        post(gw, body, key=QUOTA_KEY, headers=[("cache-control", "no-cache")])
    usage, sizes = stored_records("quota")
    assert len(sizes) == 1 and (int(usage[b"bytes"]), int(usage[b"count"])) == (sizes[0], 1)
    other = {**body, "messages": fresh("Another")}
    post(gw, other, key=QUOTA_KEY)
    assert post(gw, other, key=QUOTA_KEY).headers["x-routegate-cache"] == "hit"   # room left


def test_an_expired_entry_gives_back_all_its_bytes() -> None:
    async def scenario() -> dict[Any, Any]:
        r = aioredis.Redis()
        tag = "{" + PREFIX + "-store:t}"
        store = QuotaStore(r, lambda team: tag, "rcache")
        for _ in range(3):
            await store.save("t", "same", b"x" * 1000, ttl_s=0.3, max_bytes=10_000, max_count=9)
        await asyncio.sleep(0.5)
        await store.save("t", "other", b"y" * 10, ttl_s=60, max_bytes=10_000, max_count=9)
        usage = await r.hgetall(tag + ":rcache:usage")
        await r.delete(*[k async for k in r.scan_iter(tag + ":rcache:*")])
        await r.aclose()
        return usage
    assert asyncio.run(scenario()) == {b"bytes": b"10", b"count": b"1"}


def test_every_cache_control_line_and_directive_is_read(gw: Gateway, sim: str) -> None:
    body = {"model": "m", "messages": fresh("Lines"), "temperature": 0, "max_tokens": 4}
    post(gw, body, headers=[("cache-control", "No-Store"), ("cache-control", "max-age=0")])
    assert post(gw, body).headers["x-routegate-cache"] == "miss"    # the first line said no-store
    calls = upstream_calls(sim)
    hit = post(gw, body, headers=[("cache-control", "max-stale=5, x-no-cache-hint")])
    assert hit.headers["x-routegate-cache"] == "hit" and upstream_calls(sim) == calls


def test_an_answer_the_gateways_check_refused_is_not_kept(gw: Gateway) -> None:
    body = {"model": "ij", "messages": fresh("JSON"), "temperature": 0, "max_tokens": 40,
            "response_format": {"type": "json_object"}}
    first = post(gw, body)        # invalid JSON, delivered since no other model is left
    with pytest.raises(json.JSONDecodeError):
        json.loads(first.json()["choices"][0]["message"]["content"])
    assert post(gw, body).headers["x-routegate-cache"] == "miss"


def test_a_hit_is_only_from_a_model_the_caller_may_use(sim: str) -> None:
    team: dict[str, Any] = {"name": "t", "keys": [hashed(TEST_KEY)],
                            "allowed_models": ["m", "m2"], "response_cache": {"ttl_s": 60}}
    config = {"models": [remote(sim, "m", "default"), remote(sim, "m2", "default")],
              "teams": [team],
              "redis_url": "redis://127.0.0.1:6379/0",
              "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
              "batch": {"enabled": False}}
    body = {"model": "m", "messages": fresh("Allowed"), "temperature": 0, "max_tokens": 4}
    with run_gateway(config, env={"ROUTEGATE_ADMIN_KEY": ADMIN_KEY}) as gw:
        assert post(gw, body).headers["x-routegate-cache"] == "miss"
        narrowed = yaml.safe_load(gw.config_path.read_text())
        narrowed["teams"][0]["allowed_models"] = ["m2"]
        gw.config_path.write_text(yaml.safe_dump(narrowed))
        reload = httpx.post(gw.url + "/admin/reload",
                            headers={"authorization": f"Bearer {ADMIN_KEY}"})
        assert reload.json()["reloaded"] is True
        assert post(gw, body).status_code == 404                   # as routing says
    config["models"] = [remote(sim, "m2", "default")]               # m is gone from the config
    del team["allowed_models"]
    with run_gateway(config) as gw:
        assert post(gw, body).status_code == 404

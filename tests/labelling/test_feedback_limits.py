"""POST /v1/feedback's bounds on a real gateway: which ids wait for a record on its
way, and the per-team cap on misses (unknown or already scored ids), shared by replicas."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from gateway.ids import issued_s, new_request_id
from gateway.routes.feedback import FRESH_S, fresh
from tests.gateway.test_escalation import cascade_config
from tests.labelling.test_traffic_labels import give, sdk
from tests.support import Gateway, run_gateway


def test_request_ids_carry_the_time_they_were_issued() -> None:
    before = time.time()
    rid = new_request_id()
    issued = issued_s(rid)
    assert issued is not None and before - 0.01 <= issued <= time.time() + 0.01
    assert len({new_request_id() for _ in range(1000)}) == 1000
    assert fresh(rid, 0)

    def issued_ago(ago_s: float) -> str:
        return f"req_{int((time.time() - ago_s) * 1000):011x}{'0' * 20}"

    # A request may run for its deadline: an id issued that long ago may have
    # ended a moment ago, and one issued longer ago than that plus FRESH_S not.
    assert fresh(issued_ago(100), 120) and not fresh(issued_ago(100), 0)
    assert not fresh(issued_ago(120 + FRESH_S + 1), 120)
    for not_fresh in (issued_ago(-60), "req_000000000000000000000000", "req_" + "z" * 31,
                      "req_-" + rid[5:], "batch_abc:line-1", ""):
        assert not fresh(not_fresh, 120), not_fresh


def test_past_the_miss_cap_a_teams_feedback_is_429_until_the_window_ends(sim_url: str) -> None:
    config = cascade_config(sim_url)
    config["teams"][0]["feedback"] = True
    config["learning"] = {"feedback_max_misses": 3, "feedback_miss_window_s": 30}
    with run_gateway(config) as gw, run_gateway(config) as second:
        client = sdk(gw)
        rid = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": "Say hi."}]
        ).headers["x-routegate-request-id"]
        assert give(client, rid, 1.0)["request_id"] == rid            # a real answer: ok
        with pytest.raises(openai.ConflictError):                     # miss 1: already scored
            give(client, rid, 0.0)
        for i in range(2):                                            # misses 2 and 3
            with pytest.raises(openai.NotFoundError):
                give(client, f"req_{i:024x}", 1.0)
        with pytest.raises(openai.RateLimitError) as over:           # the fourth: refused
            give(sdk(second), "req_" + "1" * 24, 1.0)                # ... on the other replica too
        body = over.value.body
        assert body["type"] == "rate_limit_error" and body["code"] == "feedback_misses"  # type: ignore[index]
        retry = int(over.value.response.headers["retry-after"])
        assert 1 <= retry <= 30
        fresh_rid = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": "Say hello."}]
        ).headers["x-routegate-request-id"]
        with pytest.raises(openai.RateLimitError):                    # refused from memory
            give(sdk(second), fresh_rid, 1.0)
        with pytest.raises(openai.RateLimitError):                    # and in Redis
            give(client, fresh_rid, 1.0)
        # The team's chat is untouched: the cap is on feedback only.
        assert client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "Hi"}]).choices
        # Each replica counts what it answered, by team and result.
        assert feedback_counts(gw) == {"ok": 1, "already": 1, "unknown": 2, "throttled": 1}
        assert feedback_counts(second) == {"throttled": 2}


def test_feedback_on_a_stream_that_outlasted_the_deadline_finds_it_on_another_replica(
        sim_url: str) -> None:
    """A stream runs about 7 s, past escalation.deadline_s (1 s) plus FRESH_S: its id
    alone no longer says it may have just ended, but the replica streaming it marked
    it as running, so feedback sent to the other replica the moment it ends waits for
    its record instead of a 404 (which it got before the mark, unless the first
    replica happened to have flushed already)."""
    config = cascade_config(sim_url, tpot_ms=100)
    config["teams"][0]["feedback"] = True
    config["escalation"] = {"deadline_s": 1}
    with run_gateway(config) as gw, run_gateway(config) as second:
        started = time.monotonic()
        with sdk(gw).chat.completions.with_streaming_response.create(
                model="small", stream=True, max_tokens=70, extra_body={"ignore_eos": True},
                messages=[{"role": "user", "content": "Tell me a long story."}]) as raw:
            rid = raw.headers["x-routegate-request-id"]
            chunks = sum(1 for line in raw.iter_lines() if line.startswith("data: {"))
        ran = time.monotonic() - started
        assert not fresh(rid, 1) and ran > 1 + FRESH_S, (ran, chunks)   # the case at hand
        reply = give(sdk(second), rid, 0.0)
        assert reply["model"] == "small" and reply["request_id"] == rid


def feedback_counts(gw: Gateway) -> dict[str, float]:
    counts = {}
    for line in httpx.get(gw.url + "/metrics").text.splitlines():
        if line.startswith('routegate_feedback_total{result="'):
            labels, value = line.split("} ")
            assert 'team="test"' in labels, line
            counts[labels.split('result="')[1].split('"')[0]] = float(value)
    return counts

"""POST /v1/feedback's bounds on a real gateway: which ids wait for a record on its
way, and the per-team cap on misses (unknown or already scored ids), shared by replicas."""

from __future__ import annotations

import time

import openai
import pytest

from gateway.ids import issued_s, new_request_id
from gateway.routes.feedback import FRESH_S, fresh
from tests.gateway.test_escalation import cascade_config
from tests.labelling.test_traffic_labels import give, sdk
from tests.support import run_gateway


def test_request_ids_carry_the_time_they_were_issued() -> None:
    before = time.time()
    rid = new_request_id()
    issued = issued_s(rid)
    assert issued is not None and before - 0.01 <= issued <= time.time() + 0.01
    assert len({new_request_id() for _ in range(1000)}) == 1000
    assert fresh(rid)
    old = f"req_{int((time.time() - FRESH_S - 1) * 1000):011x}{'0' * 20}"
    ahead = f"req_{int((time.time() + 60) * 1000):011x}{'0' * 20}"
    for not_fresh in (old, ahead, "req_000000000000000000000000", "req_" + "z" * 31,
                      "batch_abc:line-1", ""):
        assert not fresh(not_fresh), not_fresh


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

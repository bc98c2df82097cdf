"""A client that goes away mid-stream cancels the upstream request."""

from __future__ import annotations

import time

import httpx

from tests.support import TEST_KEY, Gateway


def sim_stats(sim_url: str) -> dict:
    return httpx.get(sim_url.removesuffix("/v1") + "/sim/stats").json()["slow"]


def test_client_disconnect_cancels_upstream(gateway: Gateway, sim_url: str) -> None:
    before = sim_stats(sim_url)
    body = {"model": "slowpoke", "messages": [{"role": "user", "content": "tell a long story"}],
            "max_tokens": 200, "stream": True}
    with httpx.stream("POST", gateway.base_url + "/chat/completions", json=body,
                      headers={"authorization": f"Bearer {TEST_KEY}"}, timeout=30) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        got = [next(lines) for _ in range(4)]   # role chunk and a token, at 200 ms a token
        assert any("content" in line for line in got)
    # the client closed the connection after ~1 token of 200
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        after = sim_stats(sim_url)
        if after["cancelled"] > before["cancelled"]:
            break
        time.sleep(0.1)
    assert after["cancelled"] == before["cancelled"] + 1
    assert after["completed"] == before["completed"]
    assert after["decoding"] == 0
    # the request was still accounted, with the tokens that were generated
    deadline = time.monotonic() + 5
    while '"model":"slowpoke"' not in gateway.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    event = [line for line in gateway.log().splitlines() if '"model":"slowpoke"' in line][-1]
    assert '"usage_estimated":true' in event

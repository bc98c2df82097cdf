"""Issue 8: a non-streamed generation longer than first_byte_s (60 s) succeeds
with the default timeouts, once, and is billed once.

About 90 s of wall time: the simulator's ``slow`` model decodes at 200 ms a
token, and ``ignore_eos`` makes it generate exactly ``max_tokens``.
"""

from __future__ import annotations

import httpx

from tests.support import TEST_KEY, Gateway

AUTH = {"authorization": f"Bearer {TEST_KEY}"}


def test_a_90_second_generation_succeeds_once_and_is_billed_once(gateway: Gateway,
                                                                  sim_url: str) -> None:
    stats_url = sim_url.removesuffix("/v1") + "/sim/stats"

    def ledger_requests() -> int:
        rows = httpx.get(gateway.base_url + "/usage", headers=AUTH).json()["ledger"]
        return sum(r["requests"] for r in rows if r["model"] == "slowpoke")

    before, billed_before = httpx.get(stats_url).json()["slow"], ledger_requests()
    body = {"model": "slowpoke", "messages": [{"role": "user", "content": "a long story"}],
            "max_tokens": 450, "ignore_eos": True}
    r = httpx.post(gateway.base_url + "/chat/completions", json=body, headers=AUTH,
                   timeout=200)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 450
    after = httpx.get(stats_url).json()["slow"]
    assert after["requests"] == before["requests"] + 1          # never retried
    assert after["completed"] == before["completed"] + 1
    assert ledger_requests() == billed_before + 1               # billed once

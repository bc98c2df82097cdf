"""The scheduler and the SLO-aware choice in a running gateway, against the
simulator: queue deadlines answer (never hang), every way out of a request
gives its slot back, and a saturated model is routed around."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support import TEST_KEY, Gateway, base_config, run_gateway

AUTH = {"authorization": f"Bearer {TEST_KEY}"}
ONE_SLOT = {"max_concurrency": 1, "interactive_wait_s": 0.5}


def chat(gw: Gateway, model: str, *, max_tokens: int = 2, timeout: float = 20,
         headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens}
    return httpx.post(gw.base_url + "/chat/completions", json=body,
                      headers={**AUTH, **(headers or {})}, timeout=timeout)


class HeldStream:
    """A streamed answer read to its first token: it holds its slot until closed.
    (The line iterator is kept: dropping it would close the connection.)"""

    def __init__(self, response: httpx.Response, lines: Iterator[str]) -> None:
        self.response, self.lines = response, lines

    def close(self) -> None:
        self.response.close()


def open_stream(gw: Gateway, model: str, client: httpx.Client) -> HeldStream:
    body = {"model": model, "messages": [{"role": "user", "content": "tell a long story"}],
            "max_tokens": 200, "stream": True}
    r = client.send(client.build_request("POST", gw.base_url + "/chat/completions", json=body,
                                         headers=AUTH), stream=True)
    assert r.status_code == 200
    lines = r.iter_lines()
    assert any("content" in next(lines) for _ in range(4))
    return HeldStream(r, lines)


@pytest.fixture(scope="module")
def one_slot_gateway(sim_url: str) -> Iterator[Gateway]:
    config = base_config(sim_url, pools={"interactive": {"ttft_ms": 1, "tpot_ms": 1}})
    for model in config["models"]:
        if model["name"] in ("slowpoke", "broken"):
            model["scheduler"] = ONE_SLOT
    with run_gateway(config) as gw:
        yield gw


def test_a_request_queued_past_its_deadline_gets_503_with_retry_after(
        one_slot_gateway: Gateway) -> None:
    with httpx.Client(timeout=30) as client:
        held = open_stream(one_slot_gateway, "slowpoke", client)
        try:
            late = chat(one_slot_gateway, "slowpoke", timeout=10)   # waits 0.5 s, not for ever
        finally:
            held.close()
    assert late.status_code == 503, late.text
    assert late.json()["error"]["code"] == "queue_timeout"
    assert int(late.headers["retry-after"]) >= 1


def test_a_client_that_leaves_while_queued_is_not_billed(one_slot_gateway: Gateway) -> None:
    """Its prompt never went upstream: the ledger gains only the stream that held the slot."""
    def slowpoke_ledger() -> tuple[int, float]:
        rows = httpx.get(one_slot_gateway.base_url + "/usage", headers=AUTH).json()["ledger"]
        mine = [r for r in rows if r["model"] == "slowpoke"]
        return sum(r["requests"] for r in mine), sum(r["cost_usd"] for r in mine)

    requests_before, _ = slowpoke_ledger()
    with httpx.Client(timeout=30) as client:
        held = open_stream(one_slot_gateway, "slowpoke", client)
        try:
            with pytest.raises(httpx.TimeoutException):     # gives up while queued
                chat(one_slot_gateway, "slowpoke", timeout=0.35)
            time.sleep(0.5)                                  # the gateway notices it left
        finally:
            held.close()
    deadline = time.monotonic() + 5
    while slowpoke_ledger()[0] < requests_before + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert slowpoke_ledger()[0] == requests_before + 1      # the stream only


def test_the_slot_comes_back_when_the_client_leaves_mid_stream(one_slot_gateway: Gateway) -> None:
    for _ in range(3):   # with one slot, a leaked one would refuse the next stream
        with httpx.Client(timeout=30) as client:
            open_stream(one_slot_gateway, "slowpoke", client).close()
    ok = chat(one_slot_gateway, "slowpoke", max_tokens=1)
    assert ok.status_code == 200, ok.text


def test_the_slot_comes_back_after_an_upstream_error(one_slot_gateway: Gateway) -> None:
    codes = [chat(one_slot_gateway, "broken").status_code for _ in range(3)]
    assert codes == [502, 502, 502]          # never 503 queue_timeout: nothing leaked


def test_a_choice_predicted_to_miss_the_slo_says_so(one_slot_gateway: Gateway) -> None:
    # The SLO here is 1 ms: no model can meet it; the best prediction serves.
    r = chat(one_slot_gateway, "auto")
    assert r.status_code == 200, r.text
    assert r.headers["x-routegate-slo"] == "at-risk"
    batch = chat(one_slot_gateway, "auto", headers={"x-routegate-pool": "batch"})
    assert batch.status_code == 200, batch.text
    assert "x-routegate-slo" not in batch.headers    # batch work has no TTFT SLO


def simulated(name: str, price: float, **sim: float) -> dict:
    return {"name": name, "backend": "simulated", "ability": 0.95,
            "price": {"input_per_mtok": price, "output_per_mtok": price},
            "simulate": {"prefill_tokens_per_s": 100_000, "output_tokens_mean": 200, **sim}}


def test_slo_aware_routing_moves_off_a_saturated_model(sim_url: str) -> None:
    config = base_config(sim_url, models=[
        simulated("cheap", 0.1, tpot_ms=30, max_batch=1),        # one sequence at a time
        simulated("dear", 1.0, tpot_ms=2, max_batch=16)],
        routing={"auto_policy": "slo_aware"})
    config["teams"][0]["quality"] = 0.5
    config["teams"] = config["teams"][:1]
    with run_gateway(config) as gw, httpx.Client(timeout=30) as client:
        held = open_stream(gw, "cheap", client)                   # cheap's only slot, ~6 s
        try:
            busy = [chat(gw, "auto").headers["x-routegate-model"] for _ in range(3)]
        finally:
            held.close()
        idle = chat(gw, "auto")
    assert busy == ["dear"] * 3                # a queue on cheap would miss the 450 ms SLO
    assert idle.headers["x-routegate-model"] == "cheap"
    assert "x-routegate-slo" not in idle.headers

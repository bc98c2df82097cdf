"""Budgets through the HTTP API: 429s, soft-limit routing, /v1/usage, /admin, reload."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest
import yaml
from openai.types.chat import ChatCompletionMessageParam

from budget.nanousd import cost_nanousd
from tests.support import TEST_KEY, Gateway, base_config, hashed, run_gateway

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
ADMIN_KEY = "sk-admin-test"


@pytest.fixture(scope="module")
def budget_gateway(sim_url: str):
    config = base_config(sim_url)
    # fast costs 0.2/0.4 per Mtok; ~10 prompt tokens + 100 output ≈ $0.000042 worst case.
    config["teams"][0]["budget"] = {"daily_hard_usd": 0.0002, "daily_soft_usd": 0.00005}
    with run_gateway(config, env={"ROUTEGATE_ADMIN_KEY": ADMIN_KEY}) as gw:
        yield gw


def usage(gw: Gateway, key: str = TEST_KEY) -> dict:
    r = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()


def test_spend_is_exact_then_soft_then_hard_limit(budget_gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=budget_gateway.base_url, api_key=TEST_KEY, max_retries=0)
    expected, soft_seen, rejected = 0, False, None
    for _ in range(20):
        try:
            raw = client.chat.completions.with_raw_response.create(
                model="fast", messages=HELLO, max_tokens=100)
        except openai.RateLimitError as exc:
            rejected = exc
            break
        u = raw.parse().usage
        assert u is not None
        expected += cost_nanousd(u.prompt_tokens, u.completion_tokens, 0.2, 0.4)
        soft_seen |= raw.headers.get("x-routegate-budget") == "soft-limit"
    assert rejected is not None, "the hard limit never stopped the team"
    assert rejected.status_code == 429
    assert rejected.code == "insufficient_quota"
    assert isinstance(rejected.body, dict) and rejected.body["type"] == "insufficient_quota"
    assert soft_seen
    report = usage(budget_gateway)
    assert report["spent_today_nanousd"] == expected
    assert report["spent_today_nanousd"] <= 200_000   # $0.0002
    assert report["soft_limited"] is True
    rows = [r for r in report["ledger"] if r["model"] == "fast"]
    assert rows and rows[0]["cost_nanousd"] == expected


def test_usage_needs_a_key(budget_gateway: Gateway) -> None:
    assert httpx.get(budget_gateway.base_url + "/usage").status_code == 401


def test_admin_needs_the_admin_key(budget_gateway: Gateway) -> None:
    url = budget_gateway.url + "/admin/teams"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"authorization": f"Bearer {TEST_KEY}"}).status_code == 401


def test_admin_lists_teams_and_changes_limits(budget_gateway: Gateway) -> None:
    h = {"authorization": f"Bearer {ADMIN_KEY}"}
    teams = httpx.get(budget_gateway.url + "/admin/teams", headers=h).json()["data"]
    assert {t["team"] for t in teams} == {"test", "other"}
    # the other team has no budget; cap it at zero at run time: its next request is refused
    r = httpx.put(budget_gateway.url + "/admin/teams/other/limits", headers=h,
                  json={"daily_hard_usd": 0})
    assert r.status_code == 200, r.text
    other = openai.OpenAI(base_url=budget_gateway.base_url, api_key="sk-other-team",
                          max_retries=0)
    with pytest.raises(openai.RateLimitError):
        other.chat.completions.create(model="fast", messages=HELLO, max_tokens=5)
    assert httpx.delete(budget_gateway.url + "/admin/teams/other/limits",
                        headers=h).status_code == 200
    assert other.chat.completions.create(model="fast", messages=HELLO, max_tokens=5).usage
    bad = httpx.put(budget_gateway.url + "/admin/teams/other/limits", headers=h,
                    json={"daily_hard_usd": -1})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "daily_hard_usd"
    assert httpx.get(budget_gateway.url + "/admin/teams/nobody", headers=h).status_code == 404


def test_rpm_limit_is_a_rate_limit_error(sim_url: str) -> None:
    config = base_config(sim_url)
    config["teams"][0]["budget"] = {"rpm": 2}
    with run_gateway(config) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0)
        for _ in range(2):
            client.chat.completions.create(model="fast", messages=HELLO, max_tokens=2)
        with pytest.raises(openai.RateLimitError) as info:
            client.chat.completions.create(model="fast", messages=HELLO, max_tokens=2)
        assert info.value.code == "rate_limit_exceeded"
        assert int(info.value.response.headers["retry-after"]) >= 1


def test_limits_reload_from_the_file_without_restart(sim_url: str) -> None:
    config = base_config(sim_url)
    with run_gateway(config) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0)
        client.chat.completions.create(model="fast", messages=HELLO, max_tokens=2)
        config = yaml.safe_load(gw.config_path.read_text())
        config["teams"][0]["budget"] = {"daily_hard_usd": 0}
        gw.config_path.write_text(yaml.safe_dump(config))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                client.chat.completions.create(model="fast", messages=HELLO, max_tokens=2)
            except openai.RateLimitError:
                break
            time.sleep(0.3)
        else:
            pytest.fail("the new limit was not applied")
        assert gw.proc.poll() is None


@pytest.mark.parametrize("body", [
    b'{"daily_hard_usd": "Infinity"}',
    b'{"daily_hard_usd": "NaN"}',
    b'{"monthly_hard_usd": 1e300}',
    b'{"rpm": 1000000000000000000}',
    b'{"daily_hard_usd": Infinity}',
])
def test_admin_limits_refuse_non_finite_and_huge_values(budget_gateway: Gateway,
                                                         body: bytes) -> None:
    r = httpx.put(budget_gateway.url + "/admin/teams/other/limits", content=body,
                  headers={"authorization": f"Bearer {ADMIN_KEY}",
                           "content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_admin_limits_for_an_unknown_key_are_404(budget_gateway: Gateway) -> None:
    h = {"authorization": f"Bearer {ADMIN_KEY}"}
    url = budget_gateway.url + "/admin/teams/test/limits"
    for send in (httpx.put, httpx.delete):
        kw: dict[str, Any] = {"json": {"rpm": 5}} if send is httpx.put else {}
        r = send(url, params={"key": "no-such-key"}, headers=h, **kw)
        assert r.status_code == 404, r.text
        assert r.json()["error"]["param"] == "key"
    # the key's id (its name, else the start of its hash) is accepted
    key_id = hashed(TEST_KEY)[7:19]
    r = httpx.put(url, params={"key": key_id}, headers=h, json={"rpm": 500})
    assert r.status_code == 200, r.text
    assert httpx.delete(url, params={"key": key_id}, headers=h).status_code == 200

"""Every FastAPI route answers errors in OpenAI's shape: 404, 405, 500, and /metrics auth.

A real gateway on loopback with a real Redis; the 500 comes from a real bug
path (a Redis key of the wrong type), not from a test-only route.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest
import redis

from tests.support import TEST_KEY, Gateway, base_config, run_gateway

ADMIN_KEY = "sk-admin-shapes"


def error_of(r: httpx.Response) -> dict:
    assert r.headers["content-type"].startswith("application/json"), r.text
    body = r.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert r.headers["x-request-id"]
    return body["error"]


@pytest.fixture(scope="module")
def admin_gateway(sim_url: str) -> Iterator[tuple[Gateway, str]]:
    config = base_config(sim_url, metrics={"require_admin_key": True})
    with run_gateway(config, env={"ROUTEGATE_ADMIN_KEY": ADMIN_KEY}) as gw:
        yield gw, config["budget"]["key_prefix"]


def test_wrong_method_is_an_openai_405(gateway: Gateway) -> None:
    r = httpx.post(gateway.base_url + "/models", headers={"authorization": f"Bearer {TEST_KEY}"})
    assert r.status_code == 405
    assert error_of(r)["code"] == "method_not_allowed"
    assert r.headers["allow"] == "GET"
    client = openai.OpenAI(base_url=gateway.base_url, api_key=TEST_KEY, max_retries=0)
    with pytest.raises(openai.APIStatusError) as info:
        client.post("/models", cast_to=object)
    assert info.value.status_code == 405
    assert info.value.body["code"] == "method_not_allowed"  # type: ignore[index]


def test_unknown_path_is_an_openai_404(gateway: Gateway) -> None:
    r = httpx.get(gateway.url + "/v1/nothing-here")
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"


def test_an_uncaught_exception_is_an_openai_500_with_a_logged_traceback(
        admin_gateway: tuple[Gateway, str]) -> None:
    gw, prefix = admin_gateway
    broken = "{" + prefix + ":test}:ovr"
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    client.set(broken, "not a hash")  # the override HDEL gets WRONGTYPE: not an outage
    try:
        r = httpx.put(gw.url + "/admin/teams/test/limits", json={"rpm": 5},
                      headers={"authorization": f"Bearer {ADMIN_KEY}"})
    finally:
        client.delete(broken)
        client.close()
    assert r.status_code == 500
    err = error_of(r)
    assert err["type"] == "server_error" and "WRONGTYPE" not in err["message"]
    # Starlette re-raises after sending the handler's answer; the server logs it then.
    deadline = time.monotonic() + 10
    while "Traceback" not in gw.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "Traceback" in gw.log() and "ResponseError" in gw.log()
    assert httpx.get(gw.url + "/healthz").status_code == 200  # still serving


def test_metrics_need_the_admin_key_when_configured(admin_gateway: tuple[Gateway, str]) -> None:
    gw, _ = admin_gateway
    r = httpx.get(gw.url + "/metrics")
    assert r.status_code == 401 and error_of(r)["type"] == "authentication_error"
    r = httpx.get(gw.url + "/metrics", headers={"authorization": f"Bearer {TEST_KEY}"})
    assert r.status_code == 401
    r = httpx.get(gw.url + "/metrics", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert r.status_code == 200
    assert "routegate_budget_journal_quarantined_total" in r.text


def test_metrics_are_open_by_default(gateway: Gateway) -> None:
    r = httpx.get(gateway.url + "/metrics")
    assert r.status_code == 200 and "routegate_" in r.text

"""Every error case answers with OpenAI's error body and the right status."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support import OTHER_KEY, TEST_KEY, Gateway, base_config, run_gateway

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def post(gateway: Gateway, body: bytes | dict, key: str | None = TEST_KEY,
         **headers: str) -> httpx.Response:
    h = {"content-type": "application/json", **headers}
    if key:
        h["authorization"] = f"Bearer {key}"
    kw = {"json": body} if isinstance(body, dict) else {"content": body}
    return httpx.post(gateway.base_url + "/chat/completions", headers=h, timeout=30, **kw)


def error_of(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert r.headers["x-request-id"]
    return body["error"]


def test_missing_key_is_401(gateway: Gateway) -> None:
    r = post(gateway, {"model": "fast", "messages": HELLO}, key=None)
    assert r.status_code == 401
    assert error_of(r)["type"] == "authentication_error"


def test_wrong_key_is_401_via_sdk(gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        client.chat.completions.create(model="fast", messages=HELLO)
    assert info.value.status_code == 401
    assert info.value.code == "invalid_api_key"


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-17", messages=HELLO)
    assert info.value.code == "model_not_found"
    assert info.value.param == "model"


def test_model_outside_team_allowance_is_404(gateway: Gateway) -> None:
    r = post(gateway, {"model": "strong", "messages": HELLO}, key=OTHER_KEY)
    assert r.status_code == 404
    assert error_of(r)["code"] == "model_not_found"
    assert post(gateway, {"model": "fast", "messages": HELLO, "max_tokens": 2},
                key=OTHER_KEY).status_code == 200


def exact(r: httpx.Response, status: int, type_: str, code: str, param: str | None) -> dict:
    """The README's error table row, asserted whole."""
    assert r.status_code == status, r.text
    error = error_of(r)
    assert (error["type"], error["code"], error["param"]) == (type_, code, param), error
    return error


@pytest.mark.parametrize("raw", [b'{"model": "fast", "messages": [', b'["not", "an", "object"]'])
def test_malformed_json_is_400(gateway: Gateway, raw: bytes) -> None:
    exact(post(gateway, raw), 400, "invalid_request_error", "malformed_json", None)


def nested(levels: int) -> bytes:
    """A chat body nested ``levels`` deep, counting the top-level object as one."""
    deep = b"[" * (levels - 1) + b"]" * (levels - 1)
    return (b'{"model": "fast", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}],'
            b' "metadata_deep": ' + deep + b"}")


def test_nesting_past_254_levels_is_nesting_too_deep(gateway: Gateway) -> None:
    assert post(gateway, nested(254)).status_code == 200     # orjson's limit, reached exactly
    exact(post(gateway, nested(255)), 400, "invalid_request_error", "nesting_too_deep", None)
    # Past 1,024 levels orjson will not even parse it.
    exact(post(gateway, nested(1025)), 400, "invalid_request_error", "malformed_json", None)


@pytest.mark.parametrize("body, param", [
    ({"model": "fast"}, "messages"),
    ({"model": "fast", "messages": "hello"}, "messages"),
    ({"model": "fast", "messages": [{"content": "no role"}]}, "messages[0]"),
    ({"messages": HELLO}, "model"),
    ({"model": "fast", "messages": HELLO, "max_tokens": 0}, "max_tokens"),
    ({"model": "fast", "messages": HELLO, "max_tokens": -5}, "max_tokens"),
    ({"model": "fast", "messages": HELLO, "max_tokens": "ten"}, "max_tokens"),
    ({"model": "fast", "messages": HELLO, "max_tokens": 5000}, "max_tokens"),
    ({"model": "auto", "messages": HELLO, "max_tokens": 99999}, "max_tokens"),
    ({"model": "fast", "messages": HELLO, "stream": "yes"}, "stream"),
    ({"model": "fast", "messages": HELLO, "tools": {"a": 1}}, "tools"),
])
def test_schema_violations_are_400_with_param(gateway: Gateway, body: dict, param: str) -> None:
    r = post(gateway, body)
    assert r.status_code == 400, r.text
    assert error_of(r)["param"] == param


def test_context_overflow_is_400(gateway: Gateway) -> None:
    r = post(gateway, {"model": "fast", "messages": [{"role": "user", "content": "x " * 5000}],
                       "max_tokens": 10})
    assert r.status_code == 400
    assert error_of(r)["code"] == "context_length_exceeded"


def test_oversized_body_is_413(gateway: Gateway) -> None:
    big = {"model": "fast", "messages": [{"role": "user", "content": "a" * 70_000}]}
    r = post(gateway, big)
    assert r.status_code == 413
    assert error_of(r)["code"] == "request_too_large"


def test_oversized_chunked_body_is_413(gateway: Gateway) -> None:
    def chunks():
        yield b'{"model": "fast", "messages": [{"role": "user", "content": "'
        for _ in range(100):
            yield b"a" * 1000
        yield b'"}]}'

    r = httpx.post(gateway.base_url + "/chat/completions", content=chunks(),
                   headers={"authorization": f"Bearer {TEST_KEY}"})
    assert r.status_code == 413


def test_wrong_method_on_chat_is_405(gateway: Gateway) -> None:
    r = httpx.get(gateway.base_url + "/chat/completions",
                  headers={"authorization": f"Bearer {TEST_KEY}"})
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"
    assert error_of(r)["code"] == "method_not_allowed"


def test_upstream_failure_is_502(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="broken", messages=HELLO)
    assert info.value.status_code == 502
    assert "127.0.0.1" not in str(info.value.body), "upstream address leaked"


def test_upstream_timeout_is_504(client: openai.OpenAI) -> None:
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="hangs", messages=HELLO)
    assert info.value.status_code == 504
    assert time.monotonic() - started < 5


def test_mid_stream_drop_ends_with_error_event(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIError) as info:
        for _ in client.chat.completions.create(model="drops", messages=HELLO, max_tokens=50,
                                                stream=True):
            pass
    assert "drops" in str(info.value)


def test_unreachable_upstream_is_502_and_auto_falls_back(sim_url: str) -> None:
    config = base_config(sim_url)
    config["models"] = [
        {"name": "gone", "backend": "openai_compat", "base_url": "http://127.0.0.1:9/v1",
         "price": {"input_per_mtok": 0.01, "output_per_mtok": 0.01}},
        {"name": "flaky-cheap", "backend": "openai_compat", "base_url": sim_url,
         "upstream_model": "error", "price": {"input_per_mtok": 0.05, "output_per_mtok": 0.05}},
        {"name": "fast", "backend": "openai_compat", "base_url": sim_url,
         "price": {"input_per_mtok": 0.2, "output_per_mtok": 0.2}},
    ]
    config["teams"][1]["allowed_models"] = ["fast"]
    with run_gateway(config) as gw:
        r = post(gw, {"model": "gone", "messages": HELLO})
        assert r.status_code == 502
        assert error_of(r)["code"] == "upstream_unreachable"
        assert "127.0.0.1:9" not in r.text
        r = post(gw, {"model": "auto", "messages": HELLO, "max_tokens": 3})
        assert r.status_code == 200
        assert r.headers["x-routegate-model"] == "fast"
        r = post(gw, {"model": "auto", "messages": HELLO, "max_tokens": 3, "stream": True})
        assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
        assert r.headers["x-routegate-model"] == "fast"
        deadline = time.monotonic() + 5
        while '"attempts":3' not in gw.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert '"attempts":3' in gw.log()


def test_unknown_path_is_openai_404(gateway: Gateway) -> None:
    r = httpx.get(gateway.url + "/v1/nope")
    assert r.status_code == 404
    error_of(r)


@pytest.fixture(scope="module")
def limited_gateway(sim_url: str) -> Iterator[Gateway]:
    """A batch-only team, and a model whose upstream always answers 429."""
    config = base_config(sim_url)
    config["models"].append({"name": "limited", "backend": "openai_compat", "base_url": sim_url,
                             "upstream_model": "status-429",
                             "price": {"input_per_mtok": 0.01, "output_per_mtok": 0.01}})
    config["teams"][1]["allowed_pools"] = ["batch"]
    with run_gateway(config) as gw:
        yield gw


def test_a_pool_the_team_may_not_use_is_403_pool_not_allowed(limited_gateway: Gateway) -> None:
    body = {"model": "fast", "messages": HELLO, "max_tokens": 2}
    r = post(limited_gateway, body, key=OTHER_KEY, **{"x-routegate-pool": "interactive"})
    exact(r, 403, "permission_error", "pool_not_allowed", "x-routegate-pool")
    r = post(limited_gateway, body, key=OTHER_KEY, **{"x-routegate-pool": "bulk"})
    exact(r, 400, "invalid_request_error", "invalid_value", "x-routegate-pool")


def test_every_model_resting_is_503_models_unavailable(limited_gateway: Gateway) -> None:
    body = {"model": "limited", "messages": HELLO, "max_tokens": 2}
    first = post(limited_gateway, body)          # the upstream's 429 rests the model for 7 s
    exact(first, 429, "rate_limit_error", "rate_limit_exceeded", None)
    assert first.headers["retry-after"] == "7"
    r = post(limited_gateway, body)
    exact(r, 503, "service_unavailable", "models_unavailable", None)
    assert r.headers["retry-after"] == "5"

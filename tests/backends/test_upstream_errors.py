"""The backend edge's pure parts: upstream status mapping, Retry-After, and
scrubbing credentials out of an upstream's error message."""

from __future__ import annotations

import email.utils
import logging
import time

import orjson
import pytest

from backends.openai_compat import retry_after_s, scrub_secrets, upstream_error
from core.config import ModelConfig, Price
from core.errors import (
    UpstreamAuth,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
)

MODEL = ModelConfig(name="m", backend="openai_compat", base_url="http://127.0.0.1:1/v1",
                    api_key_env="M_KEY", price=Price(input_per_mtok=1, output_per_mtok=1))


def body(message: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})


@pytest.mark.parametrize("text, leaked", [
    ("Incorrect API key provided: sk-proj-abcDEF1234567890xyz.", "sk-proj-abcDEF1234567890xyz"),
    ("header was Authorization: Bearer abc.def-ghi_123", "abc.def-ghi_123"),
    ("bad api_key=hunter2hunter2 in query", "hunter2hunter2"),
    ('{"x_api_key": "s3cr3t-value"}', "s3cr3t-value"),
    ("token: 0123456789abcdef0123456789abcdef01", "0123456789abcdef0123456789abcdef01"),
    ("see https://user:pa55word@proxy.internal/", "pa55word"),
    ("AWS AKIAIOSFODNN7EXAMPLE denied", "AKIAIOSFODNN7EXAMPLE"),
    ("hf token hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345 expired", "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig_nature-x", "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
    ("opaque Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdo== tail", "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdo"),
])
def test_scrub_secrets_removes_credentials(text: str, leaked: str) -> None:
    scrubbed = scrub_secrets(text)
    assert leaked not in scrubbed
    assert "[redacted]" in scrubbed


def test_scrub_secrets_keeps_ordinary_messages() -> None:
    text = ("This model's maximum context length is 8192 tokens. However, you requested "
            "9000 tokens (8000 in the messages, 1000 in the completion). Model: "
            "meta-llama/Llama-3.1-8B-Instruct")
    assert scrub_secrets(text) == text


def test_scrub_secrets_removes_a_known_secret_of_any_shape() -> None:
    assert scrub_secrets("echo: tiny!key", known=("tiny!key",)) == "echo: [redacted]"


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert retry_after_s("7") == 7.0
    assert retry_after_s(" 1.5 ") == 1.5
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28 <= (retry_after_s(date) or 0) <= 31
    assert retry_after_s(email.utils.formatdate(time.time() - 30, usegmt=True)) == 0
    assert retry_after_s(None) is None and retry_after_s("soon") is None


def test_429_is_rate_limited_with_the_upstream_retry_after() -> None:
    err = upstream_error(MODEL, 429, {"retry-after": "12"}, body("slow down"))
    assert isinstance(err, UpstreamRateLimited) and err.retryable
    assert err.status_code == 429 and err.headers["retry-after"] == "12"
    assert err.code == "rate_limit_exceeded"
    assert "retry-after" not in upstream_error(MODEL, 429, {}, b"").headers


@pytest.mark.parametrize("value", ["99999999", "1e400", "inf", "Fri, 31 Dec 9999 23:59:59 GMT"])
def test_a_huge_retry_after_is_capped_at_max_rest_s(value: str) -> None:
    assert retry_after_s(value) == 300.0                       # breaker.max_rest_s's default
    assert retry_after_s(value, cap=20) == 20.0
    err = upstream_error(MODEL, 429, {"retry-after": value}, b"", max_rest_s=20)
    assert isinstance(err, UpstreamRateLimited)
    assert err.retry_after_s == 20.0 and err.headers["retry-after"] == "20"


def test_an_unreadable_retry_after_is_none() -> None:
    assert retry_after_s("nan") is None
    assert "retry-after" not in upstream_error(MODEL, 429, {"retry-after": "nan"}, b"").headers


@pytest.mark.parametrize("status", [400, 404, 405, 413, 422])
def test_client_errors_are_400_with_the_scrubbed_message(status: int) -> None:
    message = "context too long; your key sk-live-abcdefghijklmnop was logged " + "x" * 2000
    err = upstream_error(MODEL, status, {}, body(message))
    assert isinstance(err, UpstreamRejected) and not err.retryable
    assert err.status_code == 400
    assert "context too long" in err.message and "sk-live" not in err.message
    assert len(err.message) < 600


def test_a_non_json_4xx_body_is_not_relayed() -> None:
    err = upstream_error(MODEL, 400, {}, b"<html>secret internals</html>")
    assert err.status_code == 400 and "internals" not in err.message


def test_error_message_shapes_of_other_servers() -> None:
    for raw in (b'{"error": "plain string"}', b'{"object": "error", "message": "plain string"}'):
        assert "plain string" in upstream_error(MODEL, 400, {}, raw).message


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failures_are_502_upstream_auth_and_logged(
        status: int, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="routegate.backends"):
        err = upstream_error(MODEL, status, {}, body("Incorrect API key sk-abcdefghijklmnop"))
    assert isinstance(err, UpstreamAuth) and not err.retryable
    assert err.status_code == 502 and err.code == "upstream_auth"
    assert "sk-" not in err.message
    assert any("M_KEY" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)


@pytest.mark.parametrize("status", [500, 502, 503, 408, 409])
def test_server_errors_are_retryable_upstream_errors(status: int) -> None:
    err = upstream_error(MODEL, status, {}, body("overloaded"))
    assert type(err) is UpstreamError and err.retryable
    assert err.status_code == 502 and err.upstream_status == status

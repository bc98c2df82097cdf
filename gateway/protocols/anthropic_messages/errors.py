"""Every gateway error, in Anthropic's shape and with the status Anthropic uses.

    status = status_of(exc)                  # e.g. 529 for the gateway's 503s
    body = error_body(exc, status)           # {"type": "error", "error": {"type", "message"}}

    core.errors (status)                 here  error.type
    InvalidRequest, MalformedJSON (400)  400   invalid_request_error
    AuthenticationFailed (401)           401   authentication_error
    PermissionDenied (403)               403   permission_error
    NotFound, ModelNotFound (404)        404   not_found_error
    MethodNotAllowed, RequestTimeout     405, 408  invalid_request_error
    PayloadTooLarge (413)                413   request_too_large
    RateLimited, UpstreamRateLimited     429   rate_limit_error        (retry-after kept)
    QuotaExceeded (a hard budget)        429   rate_limit_error        (a spend limit, below)
    GatewayError (500), UpstreamError    500, 502  api_error
    ServiceUnavailable, UpstreamSaturated (503)  529  overloaded_error
    UpstreamTimeout (504)                504   timeout_error
    UpstreamRejected (its 4xx)           same  by status, as above

A team past its hard budget is what Anthropic calls a spend limit reached,
which its API answers 429 ``rate_limit_error`` (the SDK's
``EnforcedSpendLimitReachedError`` and ``ContractSpendLimitReachedError``
are ``RateLimitError``s): so is it here, as on the OpenAI side (429
``insufficient_quota``), and the message says which budget and how to get
under it. The gateway's 503s (no upstream capacity, a model too busy, the
budget store unreachable) are Anthropic's 529 ``overloaded_error``, which
Anthropic's clients know to retry later.
"""

from __future__ import annotations

from typing import Any

import orjson

from core.errors import GatewayError

OVERLOADED = 529
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
          500: "api_error", 504: "timeout_error", OVERLOADED: "overloaded_error"}


def status_of(exc: GatewayError) -> int:
    if exc.status_code == 503:
        return OVERLOADED
    return exc.status_code


def error_type(status: int) -> str:
    return _TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")


def error_body(exc: GatewayError, status: int) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": exc.message}}


def render_error(exc: GatewayError) -> tuple[int, bytes]:
    status = status_of(exc)
    return status, orjson.dumps(error_body(exc, status))

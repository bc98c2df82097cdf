"""Anthropic's failures, converted into ``core.errors`` at the backend edge.

    http_error(model, 529, headers, body)          # an error status -> a GatewayError
    event_error(model.name, {"type": "overloaded_error", "message": "..."})   # a stream's

    HTTP (error.type)                    gateway                           fallback, breaker
    429 rate_limit_error, retry-after    UpstreamRateLimited 429           falls back, rests
    529 overloaded_error, retry-after    UpstreamOverloaded 503            falls back, rests
    500 api_error, 504 timeout_error     UpstreamError 502                 falls back, a failure
    401 authentication_error, 403        UpstreamAuth 502 upstream_auth    no (the operator's)
    400 invalid_request_error, 413, 4xx  UpstreamRejected 400              no (the client's)
    404 not_found_error                  UpstreamRejected 400 upstream_unsupported

The same rules as ``openai_compat`` for the same statuses (``upstream_error``
there; docs/api.md, "Upstream errors"): only 529 is Anthropic's own. An
``error`` event inside a stream (after its HTTP 200) is converted by its
``error.type`` to the same classes. Messages passed on are scrubbed of
credentials and cut to ``MAX_MESSAGE`` characters.
"""

from __future__ import annotations

from typing import Any

from backends.openai_compat import (
    MAX_MESSAGE,
    error_message,
    retry_after_s,
    scrub_secrets,
    upstream_error,
)
from core.config import ModelConfig
from core.errors import (
    GatewayError,
    UpstreamAuth,
    UpstreamError,
    UpstreamOverloaded,
    UpstreamRateLimited,
    UpstreamRejected,
)
from core.escalation_config import DEFAULT_MAX_REST_S

OVERLOADED = 529
_AUTH_TYPES = frozenset({"authentication_error", "permission_error", "billing_error"})
_REJECTED_TYPES = frozenset({"invalid_request_error", "request_too_large", "not_found_error"})


def http_error(model: ModelConfig, status: int, headers: dict[str, str], body: bytes,
               known: tuple[str, ...] = (), max_rest_s: float = DEFAULT_MAX_REST_S
               ) -> GatewayError:
    """An error status from the Messages API as the gateway's error."""
    if status == OVERLOADED:
        return UpstreamOverloaded(f"model {model.name} is overloaded upstream",
                                  retry_after_s=retry_after_s(headers.get("retry-after"),
                                                              max_rest_s))
    if status == 404:
        detail = scrub_secrets(error_message(body)[:4096], known)[:MAX_MESSAGE]
        return UpstreamRejected(f"model {model.name}'s upstream does not serve this model"
                                + (f" ({detail})" if detail else ""), status_code=400,
                                code="upstream_unsupported")
    return upstream_error(model, status, headers, body, known, max_rest_s)


def event_error(name: str, error: Any, known: tuple[str, ...] = ()) -> GatewayError:
    """A stream's ``error`` event (``{"type": ..., "message": ...}``) as the gateway's error."""
    error = error if isinstance(error, dict) else {}
    kind = error.get("type") if isinstance(error.get("type"), str) else "api_error"
    message = error.get("message") if isinstance(error.get("message"), str) else ""
    detail = scrub_secrets(message[:4096], known)[:MAX_MESSAGE]
    if kind == "overloaded_error":
        return UpstreamOverloaded(f"model {name} is overloaded upstream")
    if kind == "rate_limit_error":
        return UpstreamRateLimited(f"model {name} is rate limited upstream")
    if kind in _AUTH_TYPES:
        return UpstreamAuth(f"model {name} refused the gateway's credential")
    if kind in _REJECTED_TYPES:
        return UpstreamRejected(f"model {name} rejected the request"
                                + (f": {detail}" if detail else ""), status_code=400)
    return UpstreamError(f"model {name} failed mid-stream ({kind})"
                         + (f": {detail}" if detail else ""), code="upstream_stream_error")

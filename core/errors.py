"""Every error routegate can answer with, as one tree.

    GatewayError                      status  type                    code
    ├── InvalidRequest                400     invalid_request_error   (varies)
    │   └── MalformedJSON             400     invalid_request_error   malformed_json
    ├── AuthenticationFailed          401     authentication_error    invalid_api_key
    ├── PermissionDenied              403     permission_error        (varies)
    ├── NotFound                      404     invalid_request_error   not_found
    │   └── ModelNotFound             404     invalid_request_error   model_not_found
    ├── MethodNotAllowed              405     invalid_request_error   method_not_allowed
    ├── Conflict                      409     invalid_request_error   (varies)
    ├── RequestTimeout                408     invalid_request_error   request_timeout
    ├── PayloadTooLarge               413     invalid_request_error   request_too_large
    ├── RateLimited                   429     rate_limit_error        rate_limit_exceeded
    │   ├── QuotaExceeded             429     insufficient_quota      insufficient_quota
    │   └── UpstreamRateLimited       429     rate_limit_error        rate_limit_exceeded
    ├── UpstreamError                 502     upstream_error          (varies)
    │   ├── UpstreamUnreachable       502     upstream_error          upstream_unreachable
    │   ├── UpstreamAuth              502     upstream_error          upstream_auth
    │   ├── UpstreamTooLarge          502     upstream_error          upstream_response_too_large
    │   └── UpstreamTooLong           502     upstream_error          upstream_stream_too_long
    ├── UpstreamRejected              400     invalid_request_error   upstream_rejected
    ├── ServiceUnavailable            503     service_unavailable     (varies)
    │   ├── UpstreamSaturated         503     service_unavailable     upstream_saturated
    │   └── UpstreamOverloaded        503     service_unavailable     upstream_overloaded
    └── UpstreamTimeout               504     timeout_error           upstream_timeout

``retryable`` says whether another model may succeed where this one failed:
only network and protocol failures, upstream 5xx and 429 (and Anthropic's
529 overloaded), and timeouts before the first byte. A bug is never retryable.

Backend failures are converted to this tree at the backend edge
(``backends/openai_compat.py``), and only here are errors turned into
OpenAI's wire shape ``{"error": {"message", "type", "param", "code"}}``.
Messages never carry upstream keys or URLs: callers pass the model name, not
the endpoint.
"""

from __future__ import annotations

from typing import Any

import orjson


class GatewayError(Exception):
    status_code = 500
    error_type = "server_error"
    default_code: str | None = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        self.headers = headers or {}

    @property
    def retryable(self) -> bool:
        """Whether another backend might succeed where this one failed."""
        return False

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())


class InvalidRequest(GatewayError):
    status_code = 400
    error_type = "invalid_request_error"
    default_code = "invalid_value"


class MalformedJSON(InvalidRequest):
    default_code = "malformed_json"


class AuthenticationFailed(GatewayError):
    status_code = 401
    error_type = "authentication_error"
    default_code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status_code = 403
    error_type = "permission_error"
    default_code = "permission_denied"


class NotFound(GatewayError):
    status_code = 404
    error_type = "invalid_request_error"
    default_code = "not_found"


class ModelNotFound(NotFound):
    default_code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model `{model}` does not exist or you do not have access to it.",
            param="model",
        )


class MethodNotAllowed(GatewayError):
    status_code = 405
    error_type = "invalid_request_error"
    default_code = "method_not_allowed"


class Conflict(GatewayError):
    status_code = 409
    error_type = "invalid_request_error"
    default_code = "conflict"


class RequestTimeout(GatewayError):
    """The client did not send its request body within the deadline."""

    status_code = 408
    error_type = "invalid_request_error"
    default_code = "request_timeout"


class PayloadTooLarge(GatewayError):
    status_code = 413
    error_type = "invalid_request_error"
    default_code = "request_too_large"


class RateLimited(GatewayError):
    status_code = 429
    error_type = "rate_limit_error"
    default_code = "rate_limit_exceeded"


class QuotaExceeded(RateLimited):
    """The team's hard budget would be crossed (OpenAI's ``insufficient_quota``)."""

    error_type = "insufficient_quota"
    default_code = "insufficient_quota"


class UpstreamRateLimited(RateLimited):
    """The upstream answered 429; ``headers`` carries its ``retry-after``."""

    retry_after_s: float | None = None

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kw: Any) -> None:
        headers = kw.pop("headers", None) or {}
        if retry_after_s is not None:
            headers["retry-after"] = str(max(1, int(retry_after_s + 0.999)))
        super().__init__(message, headers=headers, **kw)
        self.retry_after_s = retry_after_s

    @property
    def retryable(self) -> bool:
        return True


class UpstreamError(GatewayError):
    """The upstream answered with a failure (5xx, broken stream, bad body)."""

    status_code = 502
    error_type = "upstream_error"
    default_code = "upstream_error"

    def __init__(self, message: str, *, upstream_status: int | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.upstream_status = upstream_status

    @property
    def retryable(self) -> bool:
        return self.upstream_status is None or self.upstream_status >= 500 or (
            self.upstream_status in (408, 409, 429)
        )


class UpstreamUnreachable(UpstreamError):
    default_code = "upstream_unreachable"


class UpstreamAuth(UpstreamError):
    """The upstream refused routegate's own credential (401/403): an operator's
    problem, never blamed on the client's key."""

    default_code = "upstream_auth"

    @property
    def retryable(self) -> bool:
        return False


class UpstreamTooLarge(UpstreamError):
    """The upstream's headers or body passed the transport's size caps."""

    default_code = "upstream_response_too_large"

    @property
    def retryable(self) -> bool:
        return False


class UpstreamTooLong(UpstreamError):
    """A stream ran on past everything the request could be billed for (``n`` ×
    its output cap, and the framing): it is cut, and billed for what was relayed."""

    default_code = "upstream_stream_too_long"

    @property
    def retryable(self) -> bool:
        return False


class UpstreamRejected(GatewayError):
    """The upstream refused the request itself (4xx): passed on with its status."""

    error_type = "invalid_request_error"
    default_code = "upstream_rejected"

    def __init__(self, message: str, *, status_code: int, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.status_code = status_code


class ServiceUnavailable(GatewayError):
    status_code = 503
    error_type = "service_unavailable"
    default_code = "service_unavailable"


class UpstreamSaturated(ServiceUnavailable):
    """No upstream connection became free within ``timeouts.pool_wait_s``."""

    default_code = "upstream_saturated"

    @property
    def retryable(self) -> bool:
        return True


class UpstreamOverloaded(ServiceUnavailable):
    """The upstream said it is overloaded (Anthropic's 529 ``overloaded_error``): like
    a 429, the model rests (until ``retry_after_s``, if the upstream gave one) and
    another is tried; unlike one, the client hears of an outage, not of its rate."""

    default_code = "upstream_overloaded"

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kw: Any) -> None:
        headers = kw.pop("headers", None) or {}
        if retry_after_s is not None:
            headers["retry-after"] = str(max(1, int(retry_after_s + 0.999)))
        super().__init__(message, headers=headers, **kw)
        self.retry_after_s = retry_after_s

    @property
    def retryable(self) -> bool:
        return True


class UpstreamTimeout(GatewayError):
    status_code = 504
    error_type = "timeout_error"
    default_code = "upstream_timeout"

    def __init__(self, message: str, *, generating: bool = False, **kw: Any) -> None:
        super().__init__(message, **kw)
        # Past the first byte the upstream is generating (and will bill for it):
        # starting over on another model would pay twice and make the client wait twice.
        self.generating = generating

    @property
    def retryable(self) -> bool:
        return not self.generating

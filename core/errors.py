"""Every error routegate can answer with, as one tree.

    GatewayError                      status  type                    code
    ├── InvalidRequest                400     invalid_request_error   (varies)
    │   └── MalformedJSON             400     invalid_request_error   malformed_json
    ├── AuthenticationFailed          401     authentication_error    invalid_api_key
    ├── PermissionDenied              403     permission_error        (varies)
    ├── NotFound                      404     invalid_request_error   not_found
    │   └── ModelNotFound             404     invalid_request_error   model_not_found
    ├── MethodNotAllowed              405     invalid_request_error   method_not_allowed
    ├── PayloadTooLarge               413     invalid_request_error   request_too_large
    ├── RateLimited                   429     rate_limit_error        rate_limit_exceeded
    │   └── QuotaExceeded             429     insufficient_quota      insufficient_quota
    ├── UpstreamError                 502     upstream_error          (varies)
    │   └── UpstreamUnreachable       502     upstream_error          upstream_unreachable
    ├── UpstreamRejected              4xx     invalid_request_error   upstream_rejected
    ├── ServiceUnavailable            503     service_unavailable     (varies)
    └── UpstreamTimeout               504     timeout_error           upstream_timeout

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


class UpstreamTimeout(GatewayError):
    status_code = 504
    error_type = "timeout_error"
    default_code = "upstream_timeout"

    @property
    def retryable(self) -> bool:
        return True

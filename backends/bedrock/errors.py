"""Bedrock's errors as the gateway's (``core/errors.py``): the backend edge's one table.

    err = bedrock_error("claude", "ThrottlingException", 429, "Too many requests", headers)
    code = error_code(headers, body)           # "ThrottlingException", as botocore reads it

The error's name is read as botocore reads it (``/work/notes/providers.md`` 3.5):
the ``x-amzn-ErrorType`` header (what follows ``:`` dropped), else the body's
``code`` / ``Code``, else its ``__type`` (after ``#``). A stream's exception
frames name it in camelCase (``throttlingException``); both spellings map alike.

    ThrottlingException, ServiceQuotaExceededException -> 429 rate limited: the model
        rests (its Retry-After, if any) and the request falls back
    ModelNotReadyException, ServiceUnavailableException, InternalServerException,
    ModelTimeoutException, ModelErrorException, ModelStreamErrorException
                                    -> 502 upstream_error, retryable: falls back
    AccessDeniedException, UnrecognizedClientException, the signature errors
                                    -> 502 upstream_auth (the operator's credentials)
    ValidationException             -> 400 to the client, Bedrock's message scrubbed
    ResourceNotFoundException       -> 400 upstream_unsupported (no such model id here)
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from backends.openai_compat import MAX_MESSAGE, retry_after_s, scrub_secrets
from core.errors import (
    GatewayError,
    UpstreamAuth,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
)
from core.escalation_config import DEFAULT_MAX_REST_S

logger = logging.getLogger("routegate.backends")

THROTTLED = frozenset({"ThrottlingException", "ServiceQuotaExceededException"})
AUTH = frozenset({"AccessDeniedException", "UnrecognizedClientException",
                  "InvalidSignatureException", "SignatureDoesNotMatch",
                  "IncompleteSignatureException", "MissingAuthenticationTokenException",
                  "ExpiredTokenException", "InvalidClientTokenId"})
FALL_BACK = frozenset({"ModelNotReadyException", "ServiceUnavailableException",
                       "InternalServerException", "ModelTimeoutException",
                       "ModelErrorException", "ModelStreamErrorException"})


def _body(body: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(body[:65536])
    except orjson.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def error_code(headers: dict[str, str], body: bytes) -> str:
    data = _body(body)
    for value in (headers.get("x-amzn-errortype"), data.get("code"), data.get("Code")):
        if isinstance(value, str) and value:
            return value.split(":")[0].strip()
    kind = data.get("__type")
    return kind.rsplit("#", 1)[-1] if isinstance(kind, str) else ""


def error_text(body: bytes) -> str:
    data = _body(body)
    message = data.get("message", data.get("Message"))
    return message if isinstance(message, str) else ""


def bedrock_error(model: str, code: str, status: int, message: str,
                  headers: dict[str, str] | None = None, known: tuple[str, ...] = (),
                  max_rest_s: float = DEFAULT_MAX_REST_S) -> GatewayError:
    """The gateway's error for Bedrock's ``code`` (HTTP ``status``; 0 in a stream)."""
    name = code[:1].upper() + code[1:]
    if name in THROTTLED or (status == 429 and name not in FALL_BACK):
        wait = retry_after_s((headers or {}).get("retry-after"), max_rest_s)
        return UpstreamRateLimited(f"model {model} is rate limited upstream ({name})",
                                   retry_after_s=wait)
    if name in AUTH or status in (401, 403):
        logger.error("model %s: Bedrock refused routegate's AWS credentials (%s); check the "
                     "credential chain and the IAM policy (bedrock:InvokeModel*)", model,
                     name or status)
        return UpstreamAuth(f"model {model} refused the gateway's credential")
    detail = scrub_secrets(message[:4096], known)[:MAX_MESSAGE]
    if name == "ValidationException" or (status == 400 and name not in FALL_BACK):
        return UpstreamRejected(f"model {model} rejected the request"
                                + (f": {detail}" if detail else ""), status_code=400)
    if name == "ResourceNotFoundException" or status == 404:
        return UpstreamRejected(f"model {model}'s upstream has no such model or profile"
                                + (f" ({detail})" if detail else ""), status_code=400,
                                code="upstream_unsupported")
    # The model or the service failed, not the request: another model may answer
    # (a 424 ModelErrorException or a 429 ModelNotReadyException included).
    upstream = status if status >= 500 else 503
    return UpstreamError(f"model {model} failed upstream ({name or status})",
                         upstream_status=upstream)

"""Reading and validating a chat request without losing any of it.

    chat = parse_chat_request(raw_body, headers)

Only the fields routegate acts on are checked; every other parameter (tools,
logprobs, seed, unknown extras) stays in ``chat.body`` and goes upstream
untouched. Errors carry ``param`` like OpenAI's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from core.errors import InvalidRequest, MalformedJSON
from gateway.observe.tracing import TraceContext
from gateway.protocols.openai_fields import check_structured_fields

AUTO = "auto"
QUALITY_HEADER = "x-routegate-quality"
MAX_CHOICES = 128          # OpenAI's own bound on ``n``


@dataclass(slots=True)
class ChatRequest:
    body: dict[str, Any]
    model: str                    # as the client named it ("auto" for routed requests)
    messages: list[dict[str, Any]]
    stream: bool
    include_usage: bool           # the client asked for the usage chunk
    max_tokens: int | None
    choices: int                  # ``n``: answers asked for, each up to max_tokens
    quality: float | None         # per-request quality target override
    has_tools: bool
    has_response_format: bool
    # ids sent upstream and logged (x-request-id, traceparent)
    trace: TraceContext = field(default_factory=lambda: TraceContext.from_headers({}))

    @property
    def routed(self) -> bool:
        return self.model == AUTO


def _quality(value: Any, param: str) -> float:
    try:
        q = float(value)
    except (TypeError, ValueError):
        q = -1.0
    if not 0 < q < 1:
        raise InvalidRequest(f"quality target must be a number between 0 and 1, got {value!r}",
                             param=param)
    return q


def _positive_int(body: Mapping[str, Any], name: str, most: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidRequest(f"'{name}' must be a positive integer, got {value!r}", param=name)
    if most is not None and value > most:
        raise InvalidRequest(f"'{name}' must be at most {most}, got {value}", param=name)
    return value


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequest("'messages' is a required property", param="messages",
                             code="missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidRequest(f"messages[{i}] must be an object with a string 'role'",
                                 param=f"messages[{i}]")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise InvalidRequest(f"messages[{i}].content must be a string or an array of parts",
                                 param=f"messages[{i}].content")
    return messages


def _typed(body: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = body.get(name)
    if value is not None and not isinstance(value, kind):
        raise InvalidRequest(f"'{name}' must be {what}", param=name)
    return value


def parse_chat_request(raw: bytes, headers: Mapping[str, str]) -> ChatRequest:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise MalformedJSON("We could not parse the JSON body of your request.") from None
    if not isinstance(body, dict):
        raise MalformedJSON("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is a required string", param="model",
                             code="missing_required_parameter")
    messages = _messages(body)
    stream = _typed(body, "stream", bool, "a boolean") or False
    options = _typed(body, "stream_options", dict, "an object") or {}
    tools = _typed(body, "tools", list, "an array")
    response_format = _typed(body, "response_format", dict, "an object")
    max_tokens = _positive_int(body, "max_completion_tokens") or _positive_int(body, "max_tokens")
    choices = _positive_int(body, "n", MAX_CHOICES) or 1
    check_structured_fields(body)
    quality = None
    if model.startswith(AUTO + ":"):
        quality = _quality(model[len(AUTO) + 1 :], "model")
        model = AUTO
    elif headers.get(QUALITY_HEADER) is not None:
        quality = _quality(headers[QUALITY_HEADER], QUALITY_HEADER)
    return ChatRequest(
        body=body, model=model, messages=messages, stream=stream,
        include_usage=bool(options.get("include_usage")), max_tokens=max_tokens,
        choices=choices, quality=quality, has_tools=bool(tools),
        has_response_format=bool(response_format) and response_format.get("type") != "text",
        trace=TraceContext.from_headers(headers),
    )

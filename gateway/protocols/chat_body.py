"""An OpenAI chat body, checked into the pipeline's request: what every chat-shaped door builds.

    req = chat_request(body, headers)     # -> ModelRequest (operation CHAT), or InvalidRequest
    req = parse_chat(raw, headers)        # the same, from the raw bytes

The chat door sends its client's body; the Responses and Messages doors
build one from their own (``openai_responses/``, ``anthropic_messages/``).
Only the fields routegate acts on are checked; every other parameter
(logprobs, seed, unknown extras) stays in ``req.body`` and goes upstream
untouched. Errors carry ``param`` like OpenAI's.

These are hand checks, not a pydantic model as on the Messages and Responses
doors (``wire_model.py``): this is the proxy's hot path, and a model of the
same fields cost 11.9k more instructions per parse under callgrind (55.6k ->
67.5k, +1.1% of a proxied request's ~1.1M) and 5.1 -> 6.6 us under timeit,
on ``loadtest/bench_proxy.py``'s body.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.errors import InvalidRequest
from gateway.observe.tracing import TraceContext
from gateway.pipeline.request import (
    MAX_CHOICES,
    ModelRequest,
    load_object,
    model_and_quality,
    positive_int,
    typed,
)
from gateway.protocols.openai_fields import check_structured_fields

COUNTED_PARTS = frozenset({"text", "image_url", "refusal"})


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
        if isinstance(content, list):
            _check_parts(content, f"messages[{i}].content")
    return messages


def _check_parts(parts: list[Any], where: str) -> None:
    """Content parts the gateway can count (``classifiers/length.py``): text and
    images. Audio, files and other kinds cannot be billed honestly: a 400 naming them."""
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in COUNTED_PARTS or (kind is None and isinstance(part, str)):
            continue
        raise InvalidRequest(f"{where}[{j}]: content parts of type {kind!r} are not supported "
                             "by this gateway (it cannot count what they cost); send text "
                             "and image_url parts", param=f"{where}[{j}].type")


def chat_request(body: dict[str, Any], headers: Mapping[str, str]) -> ModelRequest:
    """A chat body (the client's, or one a door built) checked into the pipeline's request."""
    model, quality = model_and_quality(body, headers)
    messages = _messages(body)
    stream = typed(body, "stream", bool, "a boolean") or False
    options = typed(body, "stream_options", dict, "an object") or {}
    tools = typed(body, "tools", list, "an array")
    response_format = typed(body, "response_format", dict, "an object")
    # Both caps may come: one goes upstream (gateway/pipeline/dispatch.py), the larger is
    # reserved and bills, so an upstream that read the other can never bill past it.
    caps = [positive_int(body, "max_completion_tokens"), positive_int(body, "max_tokens")]
    max_tokens = max((c for c in caps if c is not None), default=None)
    choices = positive_int(body, "n", MAX_CHOICES) or 1
    check_structured_fields(body)
    return ModelRequest(
        body=body, model=model, messages=messages, stream=stream,
        include_usage=bool(options.get("include_usage")), max_tokens=max_tokens,
        choices=choices, quality=quality, has_tools=bool(tools),
        has_response_format=bool(response_format) and response_format.get("type") != "text",
        trace=TraceContext.from_headers(headers),
    )


def parse_chat(raw: bytes, headers: Mapping[str, str]) -> ModelRequest:
    return chat_request(load_object(raw), headers)

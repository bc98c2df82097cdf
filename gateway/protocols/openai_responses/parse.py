"""A Responses request → the OpenAI chat body the pipeline sends upstream (pure).

    body = load_object(raw)
    chat, wire = translate(body, history=[], response_id="resp_…", created_at=1740855869)
    chat    # {"model", "messages", "max_tokens", "tools", "response_format", "stream", ...}
    wire    # ResponsesWire: what the response object repeats, and what is stored

``instructions`` becomes the first (system) message; as in OpenAI's API it is
not carried over to a chained response, so ``wire.conversation`` (what a
stored response keeps) holds the history and this input only. Parameters the
chat protocol has no use for (``include``, ``reasoning``, ``truncation``,
prompt caching, ``service_tier``, ...) are accepted and ignored; those that
need OpenAI's own state (``conversation``, ``prompt``, ``background``) are a
400; an unknown one is a 400 ``unknown_parameter``, as OpenAI answers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import InvalidRequest
from gateway.pipeline.request import positive_int, typed
from gateway.protocols.openai_responses.items import chat_messages
from gateway.protocols.openai_responses.tools import chat_tool_choice, chat_tools, response_format

_USED = frozenset({"model", "input", "instructions", "tools", "tool_choice", "text",
                   "max_output_tokens", "temperature", "top_p", "metadata", "parallel_tool_calls",
                   "user", "stream", "store", "previous_response_id"})
_IGNORED = frozenset({"include", "truncation", "reasoning", "service_tier", "prompt_cache_key",
                      "prompt_cache_retention", "prompt_cache_options", "safety_identifier",
                      "stream_options", "top_logprobs", "max_tool_calls", "context_management",
                      "background"})
_NEEDS_OPENAI = ("conversation", "prompt")
# OpenAI's own bounds on metadata (shared.metadata).
MAX_METADATA_KEYS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512


@dataclass(slots=True)
class ResponsesWire:
    """The door's own state for one request (``ModelRequest.wire``)."""

    id: str                                   # "resp_…"
    created_at: int
    echo: dict[str, Any]                      # request fields the response object repeats
    conversation: list[dict[str, Any]]        # chat messages to store: history + this input
    store: bool = True
    team: str = ""


def check_parameters(body: dict[str, Any]) -> None:
    for key, value in body.items():
        if key in _USED or (key in _IGNORED and not (key == "background" and value)):
            continue
        if key in _NEEDS_OPENAI or key == "background":
            if value is None or value is False:
                continue
            raise InvalidRequest(f"'{key}' is not supported by this gateway (it needs OpenAI's "
                                 "own state); use previous_response_id or send the input.",
                                 param=key, code="unsupported_parameter")
        raise InvalidRequest(f"Unknown parameter: '{key}'.", param=key, code="unknown_parameter")


def check_metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_METADATA_KEYS:
        raise InvalidRequest(f"'metadata' must be an object of at most {MAX_METADATA_KEYS} keys",
                             param="metadata")
    for key, item in value.items():
        if len(key) > MAX_METADATA_KEY:
            raise InvalidRequest(f"metadata keys are at most {MAX_METADATA_KEY} characters",
                                 param=f"metadata.{key[:MAX_METADATA_KEY]}")
        if not isinstance(item, str) or len(item) > MAX_METADATA_VALUE:
            raise InvalidRequest(f"metadata values are strings of at most {MAX_METADATA_VALUE} "
                                 "characters", param=f"metadata.{key}")
    return value


def _number(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise InvalidRequest(f"'{name}' must be a number", param=name)
    return value


def _input_messages(body: dict[str, Any], history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    value = body.get("input")
    if value is None and not history:
        raise InvalidRequest("'input' is required", param="input", code="missing_required_parameter")
    messages = [] if value is None else chat_messages(value)
    if not messages and not history:
        raise InvalidRequest("'input' must not be empty", param="input")
    return messages


def _instructions(body: dict[str, Any]) -> list[dict[str, Any]]:
    value = body.get("instructions")
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "system", "content": value}] if value else []
    return chat_messages(value, "instructions")


def _echo(body: dict[str, Any], tools: list[dict[str, Any]], text: dict[str, Any],
          metadata: dict[str, str]) -> dict[str, Any]:
    """The request fields every response object repeats, with OpenAI's defaults."""
    return {
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "metadata": metadata, "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "temperature": body.get("temperature", 1.0), "text": text,
        "tool_choice": body.get("tool_choice") or "auto", "tools": tools,
        "top_p": body.get("top_p", 1.0), "truncation": body.get("truncation") or "disabled",
        "user": body.get("user"), "background": False,
    }


def _chat_body(body: dict[str, Any], messages: list[dict[str, Any]], tools: list[dict[str, Any]],
               tool_choice: Any, fmt: dict[str, Any] | None) -> dict[str, Any]:
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if tools:
        # tool_choice and parallel_tool_calls mean nothing (and OpenAI refuses them) without tools.
        chat["tools"] = tools
        if tool_choice is not None:
            chat["tool_choice"] = tool_choice
        if body.get("parallel_tool_calls") is not None:
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    if fmt is not None:
        chat["response_format"] = fmt
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    for name in ("temperature", "top_p", "user", "stream"):
        if body.get(name) is not None:
            chat[name] = body[name]
    return chat


def translate(body: dict[str, Any], history: list[dict[str, Any]], *, response_id: str,
              created_at: int) -> tuple[dict[str, Any], ResponsesWire]:
    """(the chat body, the door's state) of a Responses request; raises InvalidRequest."""
    check_parameters(body)
    positive_int(body, "max_output_tokens")
    for name in ("temperature", "top_p"):
        _number(body, name)
    for name, kind, what in (("user", str, "a string"), ("stream", bool, "a boolean"),
                             ("store", bool, "a boolean"), ("parallel_tool_calls", bool, "a boolean"),
                             ("previous_response_id", str, "a string")):
        typed(body, name, kind, what)
    metadata = check_metadata(body.get("metadata"))
    tools, echo_tools = chat_tools(body.get("tools"))
    fmt, text = response_format(body.get("text"))
    choice = chat_tool_choice(body.get("tool_choice"))      # checked even without tools
    turn = _input_messages(body, history)
    chat = _chat_body(body, _instructions(body) + history + turn, tools, choice, fmt)
    store = body.get("store")
    wire = ResponsesWire(id=response_id, created_at=created_at,
                         echo=_echo(body, echo_tools, text, metadata), conversation=history + turn,
                         store=True if store is None else store)
    return chat, wire

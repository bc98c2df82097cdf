"""A Responses request → the OpenAI chat body the pipeline sends upstream (pure).

    request = read_request(body)        # typed, or a 400 naming the parameter (model.py)
    chat, wire = translate(request, body, history=[], response_id="resp_…", created_at=1740855869)
    chat    # {"model", "messages", "max_tokens", "tools", "response_format", "stream", ...}
    wire    # ResponsesWire: what the response object repeats, and what is stored

``instructions`` becomes the first (system) message; as in OpenAI's API it is
not carried over to a chained response, so ``wire.conversation`` (what a
stored response keeps) holds the history and this input only. Parameters the
chat protocol has no use for (``include``, ``reasoning``, ``truncation``,
prompt caching, ``service_tier``, ...) are accepted and ignored; those that
need OpenAI's own state (``conversation``, ``prompt``, ``background``) are a
400; an unknown one is a 400 ``unknown_parameter``, as OpenAI answers it
(``model.py``). The response object repeats some fields as the client wrote
them: those are read from ``body``, the rest from the typed request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import InvalidRequest
from gateway.protocols.openai_responses.items import chat_messages
from gateway.protocols.openai_responses.model import ResponsesRequest
from gateway.protocols.openai_responses.tools import chat_tool_choice, chat_tools, response_format


@dataclass(slots=True)
class ResponsesWire:
    """The door's own state for one request (``ModelRequest.wire``)."""

    id: str                                   # "resp_…"
    created_at: int
    echo: dict[str, Any]                      # request fields the response object repeats
    conversation: list[dict[str, Any]]        # chat messages to store: history + this input
    store: bool = True
    team: str = ""


def _input_messages(request: ResponsesRequest, history: list[dict[str, Any]]
                    ) -> list[dict[str, Any]]:
    if request.input is None and not history:
        raise InvalidRequest("Missing required parameter: 'input'.", param="input",
                             code="missing_required_parameter")
    messages = [] if request.input is None else chat_messages(request.input)
    if not messages and not history:
        raise InvalidRequest("'input' must not be empty", param="input")
    return messages


def _instructions(request: ResponsesRequest) -> list[dict[str, Any]]:
    value = request.instructions
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "system", "content": value}] if value else []
    return chat_messages(value, "instructions")


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _echo(request: ResponsesRequest, body: dict[str, Any], tools: list[dict[str, Any]]
          ) -> dict[str, Any]:
    """The request fields every response object repeats, with OpenAI's defaults."""
    text = body.get("text") or {}
    return {
        "instructions": body.get("instructions"), "max_output_tokens": request.max_output_tokens,
        "metadata": request.metadata or {}, "parallel_tool_calls": _or(request.parallel_tool_calls, True),
        "previous_response_id": request.previous_response_id,
        "reasoning": {"effort": None, "summary": None},
        "temperature": _or(request.temperature, 1.0),
        "text": {**text, "format": text.get("format") or {"type": "text"}},
        "tool_choice": body.get("tool_choice") or "auto", "tools": tools,
        "top_p": _or(request.top_p, 1.0), "truncation": body.get("truncation") or "disabled",
        "user": request.user, "background": False,
    }


def _chat_body(request: ResponsesRequest, messages: list[dict[str, Any]],
               tools: list[dict[str, Any]], tool_choice: Any, fmt: dict[str, Any] | None
               ) -> dict[str, Any]:
    chat: dict[str, Any] = {"model": request.model, "messages": messages}
    if tools:
        # tool_choice and parallel_tool_calls mean nothing (and OpenAI refuses them) without tools.
        chat["tools"] = tools
        if tool_choice is not None:
            chat["tool_choice"] = tool_choice
        if request.parallel_tool_calls is not None:
            chat["parallel_tool_calls"] = request.parallel_tool_calls
    if fmt is not None:
        chat["response_format"] = fmt
    for name, value in (("max_tokens", request.max_output_tokens), ("temperature", request.temperature),
                        ("top_p", request.top_p), ("user", request.user), ("stream", request.stream)):
        if value is not None:
            chat[name] = value
    return chat


def translate(request: ResponsesRequest, body: dict[str, Any], history: list[dict[str, Any]], *,
              response_id: str, created_at: int) -> tuple[dict[str, Any], ResponsesWire]:
    """(the chat body, the door's state) of a typed Responses request (``body``: as it was
    written, for what the response repeats); raises InvalidRequest."""
    tools, echo_tools = chat_tools(request.tools)
    fmt = response_format(request.text)
    choice = chat_tool_choice(request.tool_choice)      # checked even without tools
    turn = _input_messages(request, history)
    chat = _chat_body(request, _instructions(request) + history + turn, tools, choice, fmt)
    wire = ResponsesWire(id=response_id, created_at=created_at,
                         echo=_echo(request, body, echo_tools), conversation=history + turn,
                         store=_or(request.store, True))
    return chat, wire

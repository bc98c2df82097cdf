"""An Anthropic Messages request, translated into the OpenAI chat body the pipeline serves.

    chat = to_chat_body(body)                 # pure: Anthropic's fields -> chat's
    req = messages_request(body, headers)     # checked, translated, into a ModelRequest

    system (string or text blocks)      -> a leading "system" message
    text / image blocks                 -> "user" content (a string, or text and image_url parts)
    tool_use blocks (assistant)         -> the assistant message's "tool_calls", input as JSON
    tool_result blocks (user)           -> "tool" messages with "tool_call_id"
    tools (name, description, input_schema) -> function tools; tool_choice auto|any|tool|none
    max_tokens, stop_sequences, temperature, top_p, metadata.user_id -> max_tokens, stop, ..., user

``top_k`` and ``thinking`` have no chat counterpart and are dropped, as are
``thinking`` blocks a client sends back, and ``cache_control`` marks. A text
document (a ``text`` or ``content`` source) is its title, context and text,
as user text. Blocks chat cannot carry (PDF documents, whose cost cannot be
counted before they are read, server tools' blocks, images inside a
tool_result) are a 400 naming the block, never silently lost.

The request keeps its body as the client wrote it (``req.native``): an
``anthropic`` upstream gets that, not the chat form (``backends/base.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from backends.base import ANTHROPIC_MESSAGES, NativeRequest
from core.errors import InvalidRequest
from gateway.pipeline.request import ModelRequest
from gateway.protocols.anthropic_messages.schema import check_request
from gateway.protocols.chat_body import chat_request

DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
TOOL_ERROR_PREFIX = "Error: "      # chat's tool messages have no is_error: the text says it


@dataclass(frozen=True, slots=True)
class MessagesWire:
    """What the door needs back to render its answer (``ModelRequest.wire``)."""

    model: str                          # as the client named it
    stop_sequences: tuple[str, ...] = ()


def _unsupported(where: str, kind: object, why: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: content blocks of type {kind!r} are not supported by "
                          f"this gateway ({why}).", param=where)


def _image_part(source: Mapping[str, Any]) -> dict[str, Any]:
    if source["type"] == "base64":
        url = f"data:{source['media_type']};base64,{source['data']}"
    else:
        url = source["url"]
    return {"type": "image_url", "image_url": {"url": url}}


def _result_text(block: Mapping[str, Any], where: str) -> str:
    content = block.get("content")
    if content is None or isinstance(content, str):
        text = content or ""
    else:
        texts = []
        for j, part in enumerate(content):
            if part["type"] != "text":
                raise _unsupported(f"{where}.content.{j}", part["type"],
                                   "chat's tool messages carry text only")
            texts.append(part["text"])
        text = "\n".join(texts)
    return TOOL_ERROR_PREFIX + text if block.get("is_error") else text


def _document_text(block: Mapping[str, Any], where: str) -> str:
    """A text document as the text the model reads: its title, context and content."""
    source = block["source"]
    if source["type"] == "text" and isinstance(source.get("data"), str):
        text = source["data"]
    elif source["type"] == "content" and isinstance(source.get("content"), str | list):
        text = _result_text({"content": source["content"]}, f"{where}.source")
    else:
        raise _unsupported(where, "document", f"a {source['type']!r} source cannot be counted "
                           "before it is read; send its text as a text document")
    return "\n\n".join(t for t in (block.get("title"), block.get("context"), text)
                        if isinstance(t, str) and t)


def _user_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _user_messages(content: str | list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """One user turn: its tool results as tool messages, in order, then its text."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        kind = block["type"]
        if kind == "tool_result":
            if parts:     # text before a result: keep the order the client wrote
                out.append({"role": "user", "content": _user_content(parts)})
                parts = []
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                        "content": _result_text(block, f"{where}.{j}")})
        elif kind == "text":
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            parts.append(_image_part(block["source"]))
        elif kind == "document":
            parts.append({"type": "text", "text": _document_text(block, f"{where}.{j}")})
        elif kind not in DROPPED_BLOCKS:
            raise _unsupported(f"{where}.{j}", kind, "a user turn may carry text, image, "
                               "text document and tool_result blocks")
    if parts or not out:
        out.append({"role": "user", "content": _user_content(parts) if parts else ""})
    return out


def _assistant_message(content: str | list[dict[str, Any]], where: str) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        kind = block["type"]
        if kind == "text":
            texts.append(block["text"])
        elif kind == "tool_use":
            calls.append({"id": block["id"], "type": "function", "function": {
                "name": block["name"], "arguments": orjson.dumps(block["input"]).decode()}})
        elif kind not in DROPPED_BLOCKS:
            raise _unsupported(f"{where}.{j}", kind, "an assistant turn may carry text and "
                               "tool_use blocks")
    message: dict[str, Any] = {"role": "assistant",
                               "content": "\n".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def chat_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        if not isinstance(system, str):
            for j, block in enumerate(system):
                if block["type"] != "text":
                    raise _unsupported(f"system.{j}", block["type"], "a system prompt is text")
        text = system if isinstance(system, str) else "\n".join(b["text"] for b in system)
        out.append({"role": "system", "content": text})
    for i, message in enumerate(body["messages"]):
        where = f"messages.{i}.content"
        if message["role"] == "user":
            out.extend(_user_messages(message["content"], where))
        else:
            out.append(_assistant_message(message["content"], where))
    return out


def _tool(tool: Mapping[str, Any], where: str) -> dict[str, Any]:
    if tool.get("type", "custom") != "custom":
        raise InvalidRequest(f"{where}: tools of type {tool['type']!r} are not supported by "
                             "this gateway; define a custom tool (name, description, "
                             "input_schema) instead.", param=where)
    function: dict[str, Any] = {"name": tool["name"], "parameters": tool["input_schema"]}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def tool_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` of the chat body."""
    tools = [_tool(t, f"tools.{i}") for i, t in enumerate(body.get("tools") or ())]
    choice = body.get("tool_choice")
    if not tools:        # chat refuses a tool_choice without tools; it means nothing then
        return {}
    fields: dict[str, Any] = {"tools": tools}
    if choice is None:
        return fields
    kind = choice["type"]
    if kind == "tool":
        if all(t["function"]["name"] != choice["name"] for t in tools):
            raise InvalidRequest(f"tool_choice.name: no tool named {choice['name']!r} in "
                                 "tools.", param="tool_choice.name")
        fields["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        fields["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
    if choice.get("disable_parallel_tool_use") and kind != "none":
        fields["parallel_tool_calls"] = False
    return fields


def to_chat_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI chat body for an Anthropic request already checked by ``check_request``."""
    chat: dict[str, Any] = {"model": body["model"], "messages": chat_messages(body),
                            "max_tokens": body["max_tokens"]}
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("stop_sequences"):
        chat["stop"] = list(body["stop_sequences"])
    user = (body.get("metadata") or {}).get("user_id")
    if user:
        chat["user"] = user
    if body.get("stream"):
        chat["stream"] = True
    chat.update(tool_fields(body))
    return chat


def messages_request(body: dict[str, Any], headers: Mapping[str, str]) -> ModelRequest:
    """An Anthropic request body, checked and translated into the pipeline's request."""
    check_request(body)
    req = chat_request(to_chat_body(body), headers)
    req.wire = MessagesWire(body["model"], tuple(body.get("stop_sequences") or ()))
    beta = headers.get("anthropic-beta")
    req.native = NativeRequest(ANTHROPIC_MESSAGES, body,
                               {"anthropic-beta": beta} if beta else {})
    return req

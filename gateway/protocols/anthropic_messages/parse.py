"""An Anthropic Messages request, translated into the OpenAI chat body the pipeline serves.

    chat = to_chat_body(read_request(body))   # pure: Anthropic's typed fields -> chat's
    req = messages_request(body, headers)     # read, translated, into a ModelRequest

    system (string or text blocks)      -> a leading "system" message
    text / image blocks                 -> "user" content (a string, or text and image_url parts)
    tool_use blocks (assistant)         -> the assistant message's "tool_calls", input as JSON
    tool_result blocks (user)           -> "tool" messages with "tool_call_id"
    tools (name, description, input_schema) -> function tools; tool_choice auto|any|tool|none
    max_tokens, stop_sequences, temperature, top_p, metadata.user_id -> max_tokens, stop, ..., user

The body is read once into typed models (``model.py``), which are its schema
too: what reaches the translation can be read. ``top_k`` and ``thinking``
have no chat counterpart and are dropped, as are ``thinking`` blocks a
client sends back, and ``cache_control`` marks. A text document (a ``text``
or ``content`` source) is its title, context and text, as user text. Blocks
chat cannot carry (PDF documents, whose cost cannot be counted before they
are read, server tools' blocks, images inside a tool_result) are a 400
naming the block, never silently lost.

The request keeps its body as the client wrote it (``req.native``): an
``anthropic`` upstream gets that, not the chat form (``backends/base.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from backends.base import ANTHROPIC_MESSAGES, NativeRequest
from core.errors import InvalidRequest
from gateway.pipeline.request import ModelRequest
from gateway.protocols.anthropic_messages.invalid import shown
from gateway.protocols.anthropic_messages.model import (
    Base64Image,
    Block,
    ContentSource,
    DocumentBlock,
    ImageBlock,
    ImageSource,
    MessagesBody,
    RedactedThinkingBlock,
    ResultPart,
    ServerTool,
    TextBlock,
    TextSource,
    ThinkingBlock,
    Tool,
    ToolChoice,
    ToolChoiceTool,
    ToolResultBlock,
    ToolUseBlock,
    read_request,
)
from gateway.protocols.chat_body import chat_request

DROPPED_BLOCKS = (ThinkingBlock, RedactedThinkingBlock)
TOOL_ERROR_PREFIX = "Error: "      # chat's tool messages have no is_error: the text says it


@dataclass(frozen=True, slots=True)
class MessagesWire:
    """What the door needs back to render its answer (``ModelRequest.wire``)."""

    model: str                          # as the client named it
    stop_sequences: tuple[str, ...] = ()


def unsupported(where: str, kind: object, why: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: content blocks of type {shown(kind)} are not supported by "
                          f"this gateway ({why}).", param=where)


def _image_part(source: ImageSource) -> dict[str, Any]:
    if isinstance(source, Base64Image):
        url = f"data:{source.media_type};base64,{source.data}"
    else:
        url = source.url
    return {"type": "image_url", "image_url": {"url": url}}


def _texts(content: str | Sequence[ResultPart] | None, where: str) -> str:
    """A tool result's (or a content document's) text: its text blocks, one per line."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, TextBlock):
            raise unsupported(f"{where}.content.{j}", part.type, "chat's tool messages carry text only")
        texts.append(part.text)
    return "\n".join(texts)


def _result_text(block: ToolResultBlock, where: str) -> str:
    text = _texts(block.content, where)
    return TOOL_ERROR_PREFIX + text if block.is_error else text


def _document_text(block: DocumentBlock, where: str) -> str:
    """A text document as the text the model reads: its title, context and content."""
    source = block.source
    if isinstance(source, TextSource):
        text = source.data
    elif isinstance(source, ContentSource):
        text = _texts(source.content, f"{where}.source")
    else:
        raise unsupported(where, "document", f"a {shown(source.type)} source cannot be counted "
                          "before it is read; send its text as a text document")
    return "\n\n".join(t for t in (block.title, block.context, text) if t)


def _user_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _user_messages(content: str | list[Block], where: str) -> list[dict[str, Any]]:
    """One user turn: its tool results as tool messages, in order, then its text."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        if isinstance(block, ToolResultBlock):
            if parts:     # text before a result: keep the order the client wrote
                out.append({"role": "user", "content": _user_content(parts)})
                parts = []
            out.append({"role": "tool", "tool_call_id": block.tool_use_id,
                        "content": _result_text(block, f"{where}.{j}")})
        elif isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_image_part(block.source))
        elif isinstance(block, DocumentBlock):
            parts.append({"type": "text", "text": _document_text(block, f"{where}.{j}")})
        elif not isinstance(block, DROPPED_BLOCKS):
            raise unsupported(f"{where}.{j}", block.type, "a user turn may carry text, image, "
                              "text document and tool_result blocks")
    if parts or not out:
        out.append({"role": "user", "content": _user_content(parts) if parts else ""})
    return out


def _arguments(block: ToolUseBlock, where: str) -> str:
    try:
        return orjson.dumps(block.input).decode()
    except orjson.JSONEncodeError:     # nested past what JSON encoders take (255 levels)
        raise InvalidRequest(f"{where}.input: a tool's input is nested too deeply.",
                             param=f"{where}.input") from None


def _assistant_message(content: str | list[Block], where: str) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            calls.append({"id": block.id, "type": "function", "function": {
                "name": block.name, "arguments": _arguments(block, f"{where}.{j}")}})
        elif not isinstance(block, DROPPED_BLOCKS):
            raise unsupported(f"{where}.{j}", block.type, "an assistant turn may carry text and "
                              "tool_use blocks")
    message: dict[str, Any] = {"role": "assistant",
                               "content": "\n".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def chat_messages(request: MessagesBody) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    system = request.system
    if system:
        text = system if isinstance(system, str) else "\n".join(b.text for b in system)
        out.append({"role": "system", "content": text})
    for i, message in enumerate(request.messages):
        where = f"messages.{i}.content"
        if message.role == "user":
            out.extend(_user_messages(message.content, where))
        else:
            out.append(_assistant_message(message.content, where))
    return out


def _tool(tool: Tool, where: str) -> dict[str, Any]:
    if isinstance(tool, ServerTool):
        raise InvalidRequest(f"{where}: tools of type {shown(tool.type)} are not supported by "
                             "this gateway; define a custom tool (name, description, "
                             "input_schema) instead.", param=where)
    function: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def tool_fields(tools: Sequence[Tool], choice: ToolChoice | None) -> dict[str, Any]:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` of the chat body."""
    chat_tools = [_tool(t, f"tools.{i}") for i, t in enumerate(tools)]
    if not chat_tools:   # chat refuses a tool_choice without tools; it means nothing then
        return {}
    fields: dict[str, Any] = {"tools": chat_tools}
    if choice is None:
        return fields
    if isinstance(choice, ToolChoiceTool):
        if all(t["function"]["name"] != choice.name for t in chat_tools):
            raise InvalidRequest(f"tool_choice.name: no tool named {shown(choice.name)} in "
                                 "tools.", param="tool_choice.name")
        fields["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    else:
        fields["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
    if choice.disable_parallel_tool_use and choice.type != "none":
        fields["parallel_tool_calls"] = False
    return fields


def to_chat_body(request: MessagesBody) -> dict[str, Any]:
    """The OpenAI chat body of a typed Anthropic request (``model.read_request``)."""
    chat: dict[str, Any] = {"model": request.model, "messages": chat_messages(request)}
    if request.max_tokens is not None:      # a count_tokens body has none
        chat["max_tokens"] = request.max_tokens
    for name, value in (("temperature", request.temperature), ("top_p", request.top_p)):
        if value is not None:
            chat[name] = value
    if request.stop_sequences:
        chat["stop"] = list(request.stop_sequences)
    if request.metadata is not None and request.metadata.user_id:
        chat["user"] = request.metadata.user_id
    if request.stream:
        chat["stream"] = True
    chat.update(tool_fields(request.tools or (), request.tool_choice))
    return chat


def messages_request(body: dict[str, Any], headers: Mapping[str, str]) -> ModelRequest:
    """An Anthropic request body, read, translated, into the pipeline's request."""
    request = read_request(body)
    req = chat_request(to_chat_body(request), headers)
    req.wire = MessagesWire(request.model, tuple(request.stop_sequences or ()))
    beta = headers.get("anthropic-beta")
    req.native = NativeRequest(ANTHROPIC_MESSAGES, body,
                               {"anthropic-beta": beta} if beta else {})
    return req

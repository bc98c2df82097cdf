"""Responses input items → OpenAI chat messages (pure).

    chat_messages("Hello")                                   # [{"role": "user", "content": "Hello"}]
    chat_messages(read_request({"model": "m", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"}]}).input)
    # [{"role": "user", "content": "Hi"},
    #  {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", ...}]},
    #  {"role": "tool", "tool_call_id": "call_1", "content": "42"}]

The items are typed already (``model.py``). A tool loop is a
``function_call`` item the client sends back, then its
``function_call_output``: they become the assistant's ``tool_calls`` and a
``tool`` message, so any chat upstream can continue it. ``reasoning`` items
(another provider's, replayed by agent frameworks) have no chat form and are
dropped; every other item type is refused naming it, never silently lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.errors import InvalidRequest
from gateway.protocols.openai_responses.invalid import shown
from gateway.protocols.openai_responses.model import (
    FunctionCall,
    FunctionCallOutput,
    ImagePart,
    Item,
    MessageItem,
    Part,
    ReasoningItem,
    RefusalPart,
    TextPart,
)

# The chat protocol's roles. "developer" is OpenAI's newer name for "system",
# which many OpenAI-compatible servers (llama.cpp, vLLM templates) do not know.
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _image_part(part: ImagePart, where: str) -> dict[str, Any]:
    if not part.image_url:
        # file_id needs OpenAI's file store, which upstreams do not have.
        raise InvalidRequest(f"{where}: only input_image with an image_url (an https or data URL) "
                             "is supported", param=f"{where}.image_url")
    image = {"url": part.image_url}
    if part.detail is not None:
        image["detail"] = part.detail
    return {"type": "image_url", "image_url": image}


def message_content(content: str | Sequence[Part], where: str) -> str | list[dict[str, Any]]:
    """A message's content: one string when it is all text, else chat content parts."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        at = f"{where}[{i}]"
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, RefusalPart):
            parts.append({"type": "text", "text": part.refusal})
        elif isinstance(part, ImagePart):
            parts.append(_image_part(part, at))
        else:
            raise InvalidRequest(f"{at}: content part type {shown(part.type)} is not supported; use "
                                 "input_text, output_text or input_image", param=f"{at}.type")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _message(item: MessageItem, where: str) -> dict[str, Any]:
    role = _ROLES[item.role]
    content = message_content(item.content, f"{where}.content")
    if role != "user" and not isinstance(content, str):
        raise InvalidRequest(f"{where}: only user messages may carry images", param=f"{where}.content")
    return {"role": role, "content": content}


def _function_call(item: FunctionCall) -> dict[str, Any]:
    return {"id": item.call_id, "type": "function",
            "function": {"name": item.name, "arguments": item.arguments}}


def _tool_output(item: FunctionCallOutput, where: str) -> dict[str, Any]:
    text = message_content(item.output, f"{where}.output")
    if not isinstance(text, str):
        raise InvalidRequest(f"{where}.output: a tool's output is text only", param=f"{where}.output")
    return {"role": "tool", "tool_call_id": item.call_id, "content": text}


def _add_call(messages: list[dict[str, Any]], call: dict[str, Any]) -> None:
    # Calls made in one turn belong to one assistant message (parallel tool calls),
    # after that turn's text if any: the shape every chat template expects.
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
        return
    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def chat_messages(value: str | Sequence[Item], where: str = "input") -> list[dict[str, Any]]:
    """The chat messages of a Responses ``input`` (a string or a list of items)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        if isinstance(item, MessageItem):
            messages.append(_message(item, at))
        elif isinstance(item, FunctionCall):
            _add_call(messages, _function_call(item))
        elif isinstance(item, FunctionCallOutput):
            messages.append(_tool_output(item, at))
        elif not isinstance(item, ReasoningItem):
            raise InvalidRequest(f"{at}: input item type {shown(item.type)} is not supported; use "
                                 "message, function_call or function_call_output items",
                                 param=f"{at}.type")
    return messages

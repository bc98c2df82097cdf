"""Responses input items → OpenAI chat messages (pure).

    chat_messages("Hello")                                   # [{"role": "user", "content": "Hello"}]
    chat_messages([{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
                   {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                   {"type": "function_call_output", "call_id": "call_1", "output": "42"}])
    # [{"role": "user", "content": "Hi"},
    #  {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", ...}]},
    #  {"role": "tool", "tool_call_id": "call_1", "content": "42"}]

A tool loop is a ``function_call`` item the client sends back, then its
``function_call_output``: they become the assistant's ``tool_calls`` and a
``tool`` message, so any chat upstream can continue it. ``reasoning`` items
(another provider's, replayed by agent frameworks) have no chat form and are
dropped; every other item type is refused naming it, never silently lost.
"""

from __future__ import annotations

from typing import Any

from core.errors import InvalidRequest

# The chat protocol's roles. "developer" is OpenAI's newer name for "system",
# which many OpenAI-compatible servers (llama.cpp, vLLM templates) do not know.
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = ("input_text", "output_text", "text")
_DROPPED_ITEMS = ("reasoning",)


def _text_of(part: dict[str, Any], where: str) -> str:
    kind = part.get("type")
    key = "refusal" if kind == "refusal" else "text"
    text = part.get(key)
    if not isinstance(text, str):
        raise InvalidRequest(f"{where}.{key} must be a string", param=f"{where}.{key}")
    return text


def _image_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        # file_id needs OpenAI's file store, which upstreams do not have.
        raise InvalidRequest(f"{where}: only input_image with an image_url (an https or data URL) "
                             "is supported", param=f"{where}.image_url")
    image = {"url": url}
    if isinstance(part.get("detail"), str):
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def message_content(content: Any, where: str) -> str | list[dict[str, Any]]:
    """A message's content: one string when it is all text, else chat content parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"{where} must be a string or an array of content parts", param=where)
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        at = f"{where}[{i}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS or kind == "refusal":
            parts.append({"type": "text", "text": _text_of(part, at)})
        elif kind == "input_image":
            parts.append(_image_part(part, at))
        else:
            raise InvalidRequest(f"{at}: content part type {kind!r} is not supported; use "
                                 "input_text, output_text or input_image", param=f"{at}.type")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    role = _ROLES.get(role) if isinstance(role, str) else None
    if role is None:
        raise InvalidRequest(f"{where}.role must be one of user, assistant, system, developer",
                             param=f"{where}.role")
    if "content" not in item:
        raise InvalidRequest(f"{where}.content is required", param=f"{where}.content",
                             code="missing_required_parameter")
    content = message_content(item["content"], f"{where}.content")
    if role != "user" and not isinstance(content, str):
        raise InvalidRequest(f"{where}: only user messages may carry images", param=f"{where}.content")
    return {"role": role, "content": content}


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or (key != "arguments" and not value):
        raise InvalidRequest(f"{where}.{key} must be a string", param=f"{where}.{key}")
    return value


def _function_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    return {"id": _string(item, "call_id", where), "type": "function",
            "function": {"name": _string(item, "name", where),
                         "arguments": _string(item, "arguments", where)}}


def _tool_output(item: dict[str, Any], where: str) -> dict[str, Any]:
    output = item.get("output")
    text = output if isinstance(output, str) else message_content(output, f"{where}.output")
    if not isinstance(text, str):
        raise InvalidRequest(f"{where}.output: a tool's output is text only", param=f"{where}.output")
    return {"role": "tool", "tool_call_id": _string(item, "call_id", where), "content": text}


def _add_call(messages: list[dict[str, Any]], call: dict[str, Any]) -> None:
    # Calls made in one turn belong to one assistant message (parallel tool calls),
    # after that turn's text if any: the shape every chat template expects.
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
        return
    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def chat_messages(value: Any, where: str = "input") -> list[dict[str, Any]]:
    """The chat messages of a Responses ``input`` (a string or a list of items)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise InvalidRequest(f"'{where}' must be a string or an array of input items", param=where)
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"{at} must be an object", param=at)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, at))
        elif kind == "function_call":
            _add_call(messages, _function_call(item, at))
        elif kind == "function_call_output":
            messages.append(_tool_output(item, at))
        elif kind not in _DROPPED_ITEMS:
            raise InvalidRequest(f"{at}: input item type {kind!r} is not supported; use message, "
                                 "function_call or function_call_output items", param=f"{at}.type")
    return messages

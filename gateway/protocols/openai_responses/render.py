"""A chat answer → the Responses ``response`` object (pure).

    output = output_items(wire, chat_message, finish_reason)   # message and function_call items
    response_object(wire, model="small", output=output, finish="stop", usage=billed)
    # {"id": "resp_…", "object": "response", "status": "completed", "output": [...],
    #  "usage": {"input_tokens", "output_tokens", "total_tokens", "*_details"}, ...}

``usage`` is what the team is billed, never an upstream's raw figures. The
status follows the finish reason as OpenAI's does: ``length`` is
``incomplete`` with ``incomplete_details.reason: max_output_tokens``. Item ids
are the response's id with the item's position, so they are unique wherever
the response is, and the same in its stream and its stored copy.
"""

from __future__ import annotations

from typing import Any

from core.usage import Usage
from gateway.protocols.openai_responses.parse import ResponsesWire

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def as_object(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one: an upstream's odd shapes never crash."""
    return value if isinstance(value, dict) else {}


def item_id(wire: ResponsesWire, kind: str, index: int) -> str:
    return f"{kind}_{wire.id.removeprefix('resp_')}{index:02d}"


def status_of(finish: Any) -> tuple[str, dict[str, str] | None]:
    """(response status, incomplete_details) for a chat finish reason."""
    reason = _INCOMPLETE.get(finish) if isinstance(finish, str) else None
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(wire: ResponsesWire, index: int, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [text_part(text)]
    return {"id": item_id(wire, "msg", index), "type": "message", "status": status,
            "role": "assistant", "content": content}


def _text(content: Any) -> str:
    """An answer's text; content given as an array of parts (some upstreams answer so)
    is its text parts, joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def call_item(wire: ResponsesWire, index: int, call_id: str, name: str, arguments: str,
              status: str) -> dict[str, Any]:
    return {"id": item_id(wire, "fc", index), "type": "function_call", "status": status,
            "call_id": call_id, "name": name, "arguments": arguments}


def output_items(wire: ResponsesWire, message: dict[str, Any], finish: Any
                 ) -> list[dict[str, Any]]:
    """The output items of one chat message: its text (if any), then its tool calls."""
    item_status = "incomplete" if status_of(finish)[0] == "incomplete" else "completed"
    text = _text(message.get("content")) or _text(message.get("refusal"))
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    items: list[dict[str, Any]] = []
    if text or not calls:
        items.append(message_item(wire, 0, text, item_status))
    for call in calls:
        function = as_object(call.get("function"))
        items.append(call_item(wire, len(items), str(call.get("id") or item_id(wire, "call", len(items))),
                               str(function.get("name") or ""), str(function.get("arguments") or ""),
                               "completed"))
    return items


def assistant_message(output: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat message a stored response's output is, to continue the conversation."""
    text = "".join(part.get("text", "") for item in output if item["type"] == "message"
                   for part in item["content"])
    calls = [{"id": item["call_id"], "type": "function",
              "function": {"name": item["name"], "arguments": item["arguments"]}}
             for item in output if item["type"] == "function_call"]
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


def usage_object(usage: Usage) -> dict[str, Any]:
    return {"input_tokens": usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens,
                                     "cache_write_tokens": usage.cache_write_tokens},
            "output_tokens": usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}


def response_object(wire: ResponsesWire, *, model: str, output: list[dict[str, Any]],
                    status: str, usage: Usage | None = None,
                    incomplete: dict[str, str] | None = None,
                    error: dict[str, Any] | None = None, completed_at: int | None = None
                    ) -> dict[str, Any]:
    return {
        "id": wire.id, "object": "response", "created_at": wire.created_at, "status": status,
        "completed_at": completed_at, "error": error, "incomplete_details": incomplete,
        "model": model, "output": output, **wire.echo, "store": wire.store,
        "usage": None if usage is None else usage_object(usage),
    }


def completed_response(wire: ResponsesWire, data: dict[str, Any], usage: Usage,
                       completed_at: int) -> dict[str, Any]:
    """The response object of a non-streamed chat completion."""
    choices = data.get("choices")
    choice = as_object(choices[0] if isinstance(choices, list) and choices else None)
    message = as_object(choice.get("message"))
    finish = choice.get("finish_reason")
    status, incomplete = status_of(finish)
    return response_object(wire, model=str(data.get("model") or ""),
                           output=output_items(wire, message, finish), status=status,
                           usage=usage, incomplete=incomplete, completed_at=completed_at)

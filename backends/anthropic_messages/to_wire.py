"""An OpenAI chat body as an Anthropic Messages request: pure, no network.

    body = to_messages_body(chat, model="claude-haiku-4-5", max_output_tokens=8192)

    system / developer messages       -> top-level ``system`` text blocks, in order
    user, assistant turns             -> alternating turns: consecutive ones merged
    text parts                        -> ``text`` blocks (empty text dropped: Anthropic refuses it)
    image_url data: URL / http(s) URL -> ``image`` with a ``base64`` / ``url`` source
    assistant ``tool_calls``          -> ``tool_use`` blocks, arguments parsed to ``input``
    ``tool`` messages                 -> ``tool_result`` blocks (``tool_use_id``) in a user turn
    tools (function.parameters)       -> tools with ``input_schema``
    ``cache_control`` on a part, a tool -> the same on its block, tool or ``tool_result``
                                         (a system message's marks its text block): the
                                         prompt-cache breakpoints LiteLLM's clients send
    tool_choice auto/required/named/none -> auto/any/tool/none; parallel_tool_calls
                                         false -> disable_parallel_tool_use
    stop                              -> ``stop_sequences`` (blank ones dropped: refused there)
    max_completion_tokens | max_tokens -> ``max_tokens`` (required there), at most the
                                         model's ``max_output_tokens``, which is also the default
    response_format json_schema       -> ``output_config.format`` (Anthropic's structured
                                         output, GA on the Messages API: no beta header)
    temperature (0..2) / top_p        -> temperature (clamped to Anthropic's 0..1) / top_p,
                                         unless ``sampling`` is off (API version 2026-10-21)
    user                              -> ``metadata.user_id``
    stream                            -> ``stream``

Dropped, having no counterpart: ``n`` of 1, ``stream_options``, ``logprobs``
(the gateway's own confidence check then finds none), ``seed``, the
penalties, ``logit_bias``, ``response_format: json_object`` (Anthropic has no
JSON mode; the answer check still judges the JSON), ``reasoning_effort``,
``metadata``, ``store``. ``n`` above 1 and content no block can carry are a
400 naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from core.errors import InvalidRequest

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_DATA_URL = re.compile(r"data:([\w.+/-]+);base64,", re.ASCII)
SYSTEM_ROLES = frozenset({"system", "developer"})


def _refuse(where: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: {why} (the model's upstream speaks Anthropic's Messages "
                          "API).", param=where)


def _text_of(content: Any, where: str) -> str:
    """A system or tool message's content, as one text."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text":
            raise _refuse(f"{where}[{j}]", "only text parts can go here")
        texts.append(str(part.get("text") or ""))
    return "\n".join(texts)


def _breakpoint(item: Any, where: str) -> dict[str, Any] | None:
    """The ``cache_control`` of a part or tool, if it has one: an object with a
    ``type`` (Anthropic's ``ephemeral``, and ``ttl``), passed on as written."""
    mark = item.get("cache_control") if isinstance(item, dict) else None
    if mark is None:
        return None
    if not isinstance(mark, dict) or not isinstance(mark.get("type"), str):
        raise _refuse(f"{where}.cache_control", "cache_control is an object with a type")
    return mark


def _marked(block: dict[str, Any], mark: dict[str, Any] | None) -> dict[str, Any]:
    if mark is not None:
        block["cache_control"] = mark
    return block


def _last_mark(content: Any, where: str) -> dict[str, Any] | None:
    """A system or tool message's breakpoint, made of its parts': the last one set."""
    if not isinstance(content, list):
        return None
    marks = [_breakpoint(part, f"{where}[{j}]") for j, part in enumerate(content)]
    return next((m for m in reversed(marks) if m is not None), None)


def image_block(url: Any, where: str) -> dict[str, Any]:
    """An ``image_url``'s URL as an image block: a data URL inlined, a web URL by URL."""
    if not isinstance(url, str):
        raise _refuse(where, "an image_url needs a url")
    found = _DATA_URL.match(url)
    if found:
        media = found.group(1).lower()
        if media not in IMAGE_TYPES:
            raise _refuse(where, f"images of type {media!r} are not taken; send jpeg, png, "
                          "gif or webp")
        return {"type": "image", "source": {"type": "base64", "media_type": media,
                                            "data": url[found.end():]}}
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise _refuse(where, "an image URL must be a data: URL or an http(s) URL")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """A user or assistant message's content as blocks; empty text is dropped."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "refusal"):
            text = part.get(kind)
            if isinstance(text, str) and text:
                out.append(_marked({"type": "text", "text": text},
                                   _breakpoint(part, f"{where}[{j}]")))
        elif kind == "image_url":
            image = part.get("image_url")
            out.append(_marked(image_block(image.get("url") if isinstance(image, dict)
                                           else image, f"{where}[{j}].image_url"),
                               _breakpoint(part, f"{where}[{j}]")))
        else:
            raise _refuse(f"{where}[{j}]", f"content parts of type {kind!r} are not taken")
    return out


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(call.get("id"), str):
        raise _refuse(where, "a tool call needs an id and a function")
    arguments = fn.get("arguments") or "{}"
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str) else arguments
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise _refuse(f"{where}.function.arguments", "a tool call's arguments must be a "
                      "JSON object")
    return {"type": "tool_use", "id": call["id"], "name": fn.get("name"), "input": value}


def _turn(message: Mapping[str, Any], where: str) -> tuple[str, list[dict[str, Any]]]:
    """(role, blocks) of one non-system chat message."""
    role = message["role"]
    if role == "tool":
        content = message.get("content")
        result = {"type": "tool_result", "tool_use_id": message.get("tool_call_id"),
                  "content": _text_of(content, f"{where}.content")}
        return "user", [_marked(result, _last_mark(content, f"{where}.content"))]
    if role == "user":
        return "user", _blocks(message.get("content"), f"{where}.content")
    if role == "assistant":
        blocks = _blocks(message.get("content"), f"{where}.content")
        for k, call in enumerate(message.get("tool_calls") or ()):
            blocks.append(_tool_use(call, f"{where}.tool_calls[{k}]"))
        return "assistant", blocks
    raise _refuse(f"{where}.role", f"messages of role {role!r} are not taken")


def system_and_turns(messages: list[dict[str, Any]]
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, turns): system messages lifted out, consecutive turns of one
    role merged (Anthropic's turns alternate), every turn non-empty."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if message["role"] in SYSTEM_ROLES:
            content = message.get("content")
            text = _text_of(content, f"{where}.content")
            if text:
                system.append(_marked({"type": "text", "text": text},
                                      _last_mark(content, f"{where}.content")))
            continue
        role, blocks = _turn(message, where)
        if not blocks:
            raise _refuse(f"{where}.content", "a message must have non-empty content")
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if not turns:
        raise _refuse("messages", "at least one user or assistant message is needed")
    return system, turns


def tool_fields(chat: Mapping[str, Any]) -> dict[str, Any]:
    """``tools`` and ``tool_choice`` in Anthropic's shape."""
    tools = []
    for i, tool in enumerate(chat.get("tools") or ()):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or tool.get("type", "function") != "function":
            raise _refuse(f"tools[{i}]", "only function tools are taken")
        out = {"name": fn.get("name"),
               "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}}
        if fn.get("description"):
            out["description"] = fn["description"]
        tools.append(_marked(out, _breakpoint(tool, f"tools[{i}]")))
    if not tools:
        return {}
    fields: dict[str, Any] = {"tools": tools}
    choice = chat.get("tool_choice")
    if isinstance(choice, dict):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise _refuse("tool_choice", "a named tool_choice needs function.name")
        fields["tool_choice"] = {"type": "tool", "name": name}
    elif choice in ("auto", "required", "none"):
        fields["tool_choice"] = {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
    if chat.get("parallel_tool_calls") is False:
        kind = fields.setdefault("tool_choice", {"type": "auto"})
        if kind["type"] != "none":
            kind["disable_parallel_tool_use"] = True
    return fields


def _output_fields(chat: Mapping[str, Any]) -> dict[str, Any]:
    fmt = chat.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise _refuse("response_format.json_schema.schema", "a JSON schema object is needed")
        return {"output_config": {"format": {"type": "json_schema", "schema": schema}}}
    return {}


def _sampling(chat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    temperature = chat.get("temperature")
    if isinstance(temperature, int | float) and not isinstance(temperature, bool):
        out["temperature"] = min(max(float(temperature), 0.0), 1.0)   # OpenAI's reaches 2
    top_p = chat.get("top_p")
    if isinstance(top_p, int | float) and not isinstance(top_p, bool):
        out["top_p"] = min(max(float(top_p), 0.0), 1.0)
    return out


def output_cap(chat: Mapping[str, Any], max_output_tokens: int) -> int:
    """The ``max_tokens`` Anthropic requires: the client's cap, at most the model's."""
    cap = chat.get("max_completion_tokens") or chat.get("max_tokens")
    if isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0:
        return max_output_tokens
    return min(cap, max_output_tokens)


def to_messages_body(chat: Mapping[str, Any], *, model: str, max_output_tokens: int,
                     sampling: bool = True) -> dict[str, Any]:
    """The Messages request for a chat body the gateway checked (``chat_body.py``)."""
    if (chat.get("n") or 1) != 1:
        raise _refuse("n", "one answer per request only")
    system, turns = system_and_turns(chat["messages"])
    body: dict[str, Any] = {"model": model, "max_tokens": output_cap(chat, max_output_tokens),
                            "messages": turns}
    if system:
        body["system"] = system
    stop = chat.get("stop")
    stops = [stop] if isinstance(stop, str) else list(stop or ())
    stops = [s for s in stops if isinstance(s, str) and s.strip()]
    if stops:
        body["stop_sequences"] = stops
    if sampling:
        body.update(_sampling(chat))
    if isinstance(chat.get("user"), str) and chat["user"]:
        body["metadata"] = {"user_id": chat["user"]}
    body.update(tool_fields(chat))
    body.update(_output_fields(chat))
    if chat.get("stream"):
        body["stream"] = True
    return body

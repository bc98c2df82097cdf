"""OpenAI chat request -> Bedrock Converse request: pure, no I/O.

    request = to_converse(payload, max_output_tokens=2048)
    request.body            # the Converse JSON (modelId goes in the URL, not here)
    request.structured      # the forced tool standing for response_format, if any

What maps to what (``/work/notes/providers.md`` 3.2; the service model's shapes):

    system / developer messages  -> system [{"text"}]
    user / assistant / tool      -> messages, neighbours of one role merged into one turn
                                    (tool results are user turns, as Converse wants them)
    text parts                   -> {"text"}; blank text is left out (Converse refuses it)
    image_url data: URLs         -> {"image": {"format", "source": {"bytes": <base64>}}}
    "cache_control" on a part    -> a {"cachePoint": {"type": "default"}} after its block
    assistant tool_calls         -> {"toolUse": {"toolUseId", "name", "input"}}
    tool messages                -> {"toolResult": {"toolUseId", "content": [{"text"}]}}
    tools                        -> toolConfig.tools [{"toolSpec": {name, description,
                                    inputSchema: {"json": parameters}}}]
    tool_choice auto|required|named -> toolChoice {"auto"}|{"any"}|{"tool": {"name"}}
    tool_choice none             -> no toolConfig (Converse has no "none"), unless the
                                    conversation holds tool blocks, which need one: then
                                    the tools go without a choice
    response_format json_schema  -> a forced tool of the schema's name whose input is
                                    the answer (json_object: any object)
    max_tokens / max_completion_tokens -> inferenceConfig.maxTokens (else the model's
                                    max_output_tokens, so that no answer outruns its bill)
    temperature, top_p, stop     -> temperature, topP, stopSequences (0..1 on Bedrock)

What Converse cannot carry is a 400 naming the field (``n`` > 1, images by URL,
temperature above 1, tool arguments that are not a JSON object), never dropped
in silence. Sampling knobs Converse lacks (``logprobs``, ``seed``, the penalties,
``logit_bias``, ``user``, ``parallel_tool_calls``) are not sent: the answer comes
without logprobs. A tool call id Converse's pattern refuses is rewritten the same
way in the call and its result, so the pairing holds.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

import orjson

from core.errors import InvalidRequest

IMAGE_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg",
                 "image/gif": "gif", "image/webp": "webp"}
CACHE_POINT = {"cachePoint": {"type": "default"}}
_TOOL_ID = re.compile(r"^[a-zA-Z0-9_.:-]{1,64}$")
_NOT_ID = re.compile(r"[^a-zA-Z0-9_.:-]")
MAX_STOP_SEQUENCES = 2500


@dataclass(frozen=True, slots=True)
class ConverseRequest:
    body: dict[str, Any]
    structured: str | None = None     # the tool whose input is the answer (response_format)


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(f"This model is served by Amazon Bedrock: {message}", param=param)


def tool_id(value: Any) -> str:
    """A tool call's id as Converse's ``ToolUseId`` allows it (1..64 of [a-zA-Z0-9_.:-])."""
    text = str(value or "call")
    return text if _TOOL_ID.match(text) else (_NOT_ID.sub("_", text)[:64] or "call")


def _image(url: Any, where: str) -> dict[str, Any]:
    if not isinstance(url, str) or not url.startswith("data:"):
        raise _bad("images must be data: URLs (base64); Bedrock does not fetch image URLs",
                   where)
    head, _, data = url.partition(",")
    mime = head[5:].split(";")[0].lower()
    if mime not in IMAGE_FORMATS or ";base64" not in head:
        raise _bad(f"images must be base64 PNG, JPEG, GIF or WebP, not {mime or 'unknown'!r}",
                   where)
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _bad("the image's base64 data is not valid", where) from None
    return {"image": {"format": IMAGE_FORMATS[mime], "source": {"bytes": data}}}


def _blocks(content: Any, where: str, images: bool) -> list[dict[str, Any]]:
    """A message's content as Converse blocks (text, images, cache points)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}] if content.strip() else []
    out: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            if part["text"].strip():
                out.append({"text": part["text"]})
        elif kind == "image_url" and images:
            out.append(_image((part.get("image_url") or {}).get("url"), f"{where}[{j}]"))
        elif kind != "refusal":
            raise _bad(f"content parts of type {kind!r} cannot go here", f"{where}[{j}]")
        if isinstance(part, dict) and part.get("cache_control") and out:
            out.append(dict(CACHE_POINT))
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content or [] if isinstance(p, dict)
                     and isinstance(p.get("text"), str))


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise _bad("each tool call needs a function name", where)
    try:
        arguments = orjson.loads(fn.get("arguments") or "{}")
    except orjson.JSONDecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        raise _bad("a tool call's arguments must be a JSON object", f"{where}.function.arguments")
    return {"toolUse": {"toolUseId": tool_id(call.get("id")), "name": fn["name"],
                        "input": arguments}}


def _message_blocks(message: dict[str, Any], where: str) -> tuple[str, list[dict[str, Any]]]:
    role, content = message["role"], message.get("content")
    if role == "user":
        return "user", _blocks(content, f"{where}.content", images=True)
    if role == "assistant":
        blocks = _blocks(content, f"{where}.content", images=False)
        calls = message.get("tool_calls") or []
        return "assistant", blocks + [_tool_use(c, f"{where}.tool_calls[{k}]")
                                      for k, c in enumerate(calls)]
    if role == "tool":
        text = _text_of(content)
        return "user", [{"toolResult": {"toolUseId": tool_id(message.get("tool_call_id")),
                                        "content": [{"text": text}] if text.strip() else []}}]
    raise _bad(f"messages of role {role!r} have no Converse counterpart", f"{where}.role")


def conversation(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]],
                                                          list[dict[str, Any]]]:
    """(system blocks, turns): one role per turn, alternating, starting with the user."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if message["role"] in ("system", "developer"):
            system += _blocks(message.get("content"), f"messages[{i}].content", images=False)
            continue
        role, blocks = _message_blocks(message, f"messages[{i}]")
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    if not turns or turns[0]["role"] != "user":
        raise _bad("the conversation must start with a user message (after any system "
                   "messages)", "messages")
    return system, turns


def _has_tool_blocks(turns: list[dict[str, Any]]) -> bool:
    return any("toolUse" in b or "toolResult" in b for t in turns for b in t["content"])


def _tool_spec(tool: dict[str, Any], where: str) -> dict[str, Any]:
    fn = tool.get("function") if tool.get("type") == "function" else None
    if not isinstance(fn, dict):
        raise _bad("only function tools can be sent", where)
    spec: dict[str, Any] = {"name": fn["name"], "inputSchema": {
        "json": fn.get("parameters") or {"type": "object", "properties": {}}}}
    if fn.get("description"):
        spec["description"] = fn["description"]
    return {"toolSpec": spec}


def tool_config(payload: dict[str, Any], turns: list[dict[str, Any]]
                ) -> tuple[dict[str, Any] | None, str | None]:
    """(toolConfig or None, the structured-output tool's name or None)."""
    tools = [_tool_spec(t, f"tools[{k}]") for k, t in enumerate(payload.get("tools") or [])]
    choice = payload.get("tool_choice")
    fmt = payload.get("response_format") or {}
    if fmt.get("type") in ("json_schema", "json_object"):
        if tools:
            raise _bad("response_format cannot be combined with tools here (it is sent as "
                       "a forced tool)", "response_format")
        schema = fmt.get("json_schema") or {}
        name = schema.get("name") or "json_answer"
        spec: dict[str, Any] = {"name": name, "inputSchema": {
            "json": schema.get("schema") or {"type": "object"}}}
        if schema.get("description"):
            spec["description"] = schema["description"]
        return {"tools": [{"toolSpec": spec}], "toolChoice": {"tool": {"name": name}}}, name
    if not tools:
        return None, None
    if choice == "none":
        # Converse has no "none": the tools go only when the conversation's tool blocks
        # need a toolConfig, and then without a choice.
        return ({"tools": tools} if _has_tool_blocks(turns) else None), None
    config: dict[str, Any] = {"tools": tools}
    if choice == "required":
        config["toolChoice"] = {"any": {}}
    elif isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if name not in {t["toolSpec"]["name"] for t in tools}:
            raise _bad(f"tool_choice names {name!r}, which is not in tools", "tool_choice")
        config["toolChoice"] = {"tool": {"name": name}}
    elif choice in (None, "auto"):
        config["toolChoice"] = {"auto": {}}
    return config, None


def inference_config(payload: dict[str, Any], max_output_tokens: int) -> dict[str, Any]:
    cap = payload.get("max_completion_tokens") or payload.get("max_tokens") or max_output_tokens
    config: dict[str, Any] = {"maxTokens": cap}
    temperature, top_p = payload.get("temperature"), payload.get("top_p")
    if temperature is not None:
        if not isinstance(temperature, int | float) or not 0 <= temperature <= 1:
            raise _bad("temperature must be between 0 and 1", "temperature")
        config["temperature"] = temperature
    if top_p is not None:
        if not isinstance(top_p, int | float) or not 0 <= top_p <= 1:
            raise _bad("top_p must be between 0 and 1", "top_p")
        config["topP"] = top_p
    stop = payload.get("stop")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if stops:
        if len(stops) > MAX_STOP_SEQUENCES or not all(isinstance(s, str) and s for s in stops):
            raise _bad("stop must be non-empty strings", "stop")
        config["stopSequences"] = stops
    return config


def to_converse(payload: dict[str, Any], max_output_tokens: int) -> ConverseRequest:
    """The Converse body for an OpenAI chat body (already checked by the chat door)."""
    if (payload.get("n") or 1) != 1:
        raise _bad("n must be 1", "n")
    system, turns = conversation(payload["messages"])
    body: dict[str, Any] = {"messages": turns,
                            "inferenceConfig": inference_config(payload, max_output_tokens)}
    if system:
        body["system"] = system
    tools, structured = tool_config(payload, turns)
    if tools is not None:
        body["toolConfig"] = tools
    return ConverseRequest(body, structured)

"""Responses ``tools``, ``tool_choice`` and ``text.format`` → their chat forms (pure).

    chat_tools([{"type": "function", "name": "f", "parameters": {...}}])
    # [{"type": "function", "function": {"name": "f", "parameters": {...}}}]
    chat_tool_choice({"type": "function", "name": "f"})   # {"type": "function", "function": {"name": "f"}}
    response_format({"format": {"type": "json_schema", "name": "x", "schema": {...}}})
    # {"type": "json_schema", "json_schema": {"name": "x", "schema": {...}}}

Only function tools reach a chat upstream. OpenAI's hosted tools (web
search, file search, code interpreter, computer use, image generation, MCP,
shells, ...) run inside OpenAI: a gateway in front of chat servers cannot
serve them, so they are a 400 naming the tool rather than a tool the model
never gets. The chat forms are then checked like any chat request's
(``gateway/protocols/openai_fields.py``), and drive escalation the same way.
"""

from __future__ import annotations

from typing import Any

from core.errors import InvalidRequest

_CHOICE_WORDS = ("auto", "none", "required")
_FORMATS = ("text", "json_object", "json_schema")


def _function_tool(tool: dict[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{where}.name is required", param=f"{where}.name",
                             code="missing_required_parameter")
    parameters = tool.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise InvalidRequest(f"{where}.parameters must be an object", param=f"{where}.parameters")
    function: dict[str, Any] = {"name": name,
                                "parameters": parameters or {"type": "object", "properties": {}}}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    # The response repeats the tool as OpenAI does: strict defaults to true in Responses.
    echo = {"type": "function", "name": name, "description": tool.get("description"),
            "parameters": parameters, "strict": tool.get("strict", True)}
    return {"type": "function", "function": function}, echo


def chat_tools(tools: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(chat tools, the tools as the response repeats them)."""
    if tools is None:
        return [], []
    if not isinstance(tools, list):
        raise InvalidRequest("'tools' must be an array", param="tools")
    chat, echo = [], []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise InvalidRequest(
                f"Tool type {kind!r} (tools[{i}]) is not supported by this gateway: its "
                "upstreams are chat models, so only function tools can be served.",
                param=f"tools[{i}].type", code="unsupported_tool")
        pair = _function_tool(tool, f"tools[{i}]")
        chat.append(pair[0])
        echo.append(pair[1])
    return chat, echo


def _named(ref: Any, where: str) -> dict[str, Any]:
    if not isinstance(ref, dict) or ref.get("type") != "function" or not isinstance(
            ref.get("name"), str):
        raise InvalidRequest(f"{where} must be {{\"type\": \"function\", \"name\": ...}}", param=where)
    return {"type": "function", "function": {"name": ref["name"]}}


def chat_tool_choice(choice: Any) -> Any:
    """The chat ``tool_choice`` of a Responses one (None: not given)."""
    if choice is None or choice in _CHOICE_WORDS:
        return choice
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "function":
        return _named(choice, "tool_choice")
    if kind == "allowed_tools":
        mode, tools = choice.get("mode"), choice.get("tools")
        if mode not in ("auto", "required") or not isinstance(tools, list):
            raise InvalidRequest("tool_choice.allowed_tools needs mode auto|required and tools",
                                 param="tool_choice")
        return {"type": "allowed_tools", "allowed_tools": {
            "mode": mode, "tools": [_named(t, f"tool_choice.tools[{i}]") for i, t in enumerate(tools)]}}
    raise InvalidRequest(f"tool_choice {choice!r} is not supported: use auto, none, required, or "
                         "a function by name", param="tool_choice")


def _json_schema(fmt: dict[str, Any]) -> dict[str, Any]:
    name, schema = fmt.get("name"), fmt.get("schema")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("text.format.name is required for json_schema",
                             param="text.format.name", code="missing_required_parameter")
    if not isinstance(schema, dict):
        raise InvalidRequest("text.format.schema must be a JSON schema object",
                             param="text.format.schema", code="missing_required_parameter")
    spec: dict[str, Any] = {"name": name, "schema": schema}
    for key in ("description", "strict"):
        if fmt.get(key) is not None:
            spec[key] = fmt[key]
    return {"type": "json_schema", "json_schema": spec}


def response_format(text: Any) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the chat ``response_format``, or None for plain text; ``text`` as the response repeats it)."""
    if text is None:
        return None, {"format": {"type": "text"}}
    if not isinstance(text, dict):
        raise InvalidRequest("'text' must be an object", param="text")
    fmt = text.get("format") or {"type": "text"}
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in _FORMATS:
        raise InvalidRequest(f"text.format.type must be one of {', '.join(_FORMATS)}",
                             param="text.format.type")
    echo = {**text, "format": fmt}
    if kind == "text":
        return None, echo
    if kind == "json_object":
        return {"type": "json_object"}, echo
    return _json_schema(fmt), echo

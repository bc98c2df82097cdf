"""Responses ``tools``, ``tool_choice`` and ``text.format`` → their chat forms (pure).

    request = read_request(body)               # typed (model.py)
    chat_tools(request.tools)                  # ([{"type": "function", "function": {...}}], echo)
    chat_tool_choice(request.tool_choice)      # {"type": "function", "function": {"name": "f"}}
    response_format(request.text)              # {"type": "json_schema", "json_schema": {...}}

Only function tools reach a chat upstream. OpenAI's hosted tools (web
search, file search, code interpreter, computer use, image generation, MCP,
shells, ...) run inside OpenAI: a gateway in front of chat servers cannot
serve them, so they are a 400 naming the tool rather than a tool the model
never gets. The chat forms are then checked like any chat request's
(``gateway/protocols/openai_fields.py``), and drive escalation the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.errors import InvalidRequest
from gateway.protocols.openai_responses.invalid import shown
from gateway.protocols.openai_responses.model import (
    AllowedToolsChoice,
    FunctionChoice,
    FunctionTool,
    JsonObjectFormat,
    JsonSchemaFormat,
    TextConfig,
    Tool,
    ToolChoice,
)


def _function_tool(tool: FunctionTool) -> tuple[dict[str, Any], dict[str, Any]]:
    function: dict[str, Any] = {"name": tool.name,
                                "parameters": tool.parameters or {"type": "object", "properties": {}}}
    if tool.description is not None:
        function["description"] = tool.description
    if tool.strict is not None:
        function["strict"] = tool.strict
    # The response repeats the tool as OpenAI does: strict defaults to true in Responses.
    echo = {"type": "function", "name": tool.name, "description": tool.description,
            "parameters": tool.parameters, "strict": True if tool.strict is None else tool.strict}
    return {"type": "function", "function": function}, echo


def chat_tools(tools: Sequence[Tool] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(chat tools, the tools as the response repeats them)."""
    chat, echo = [], []
    for i, tool in enumerate(tools or ()):
        if not isinstance(tool, FunctionTool):
            raise InvalidRequest(
                f"Tool type {shown(tool.type)} (tools[{i}]) is not supported by this gateway: its "
                "upstreams are chat models, so only function tools can be served.",
                param=f"tools[{i}].type", code="unsupported_tool")
        pair = _function_tool(tool)
        chat.append(pair[0])
        echo.append(pair[1])
    return chat, echo


def _named(ref: FunctionChoice) -> dict[str, Any]:
    return {"type": "function", "function": {"name": ref.name}}


def chat_tool_choice(choice: ToolChoice | None) -> Any:
    """The chat ``tool_choice`` of a Responses one (None: not given)."""
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, FunctionChoice):
        return _named(choice)
    if isinstance(choice, AllowedToolsChoice):
        return {"type": "allowed_tools", "allowed_tools": {
            "mode": choice.mode, "tools": [_named(t) for t in choice.tools]}}
    raise InvalidRequest(f"tool_choice of type {shown(choice.type)} is not supported: use auto, none, "
                         "required, or a function by name", param="tool_choice")


def response_format(text: TextConfig | None) -> dict[str, Any] | None:
    """The chat ``response_format`` of ``text.format``; None for plain text."""
    fmt = text.format if text is not None else None
    if isinstance(fmt, JsonObjectFormat):
        return {"type": "json_object"}
    if not isinstance(fmt, JsonSchemaFormat):
        return None
    spec: dict[str, Any] = {"name": fmt.name, "schema": fmt.json_schema}
    if fmt.description is not None:
        spec["description"] = fmt.description
    if fmt.strict is not None:
        spec["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": spec}

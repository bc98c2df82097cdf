"""The parts of a request a model reads besides its messages: tools and a response schema.

    structured_tokens(body, counter)            # tools + response_format, as OpenAI renders them
    structured_tokens(body, counter, ANTHROPIC) # tools as Anthropic renders them
    tools_text(body["tools"])                   # the TypeScript-like text OpenAI's models read

An upstream bills every token its model reads, and an agent's tool
definitions are often most of them: fifty tools are some twenty thousand
tokens before the first word of the conversation. These are counted with
the messages (``classifiers/length.py``) into one prompt count per request,
which routing, the ceiling, the reservation and ``count_tokens`` all read.

- **OpenAI** renders function tools into its system message as a TypeScript
  namespace (``namespace functions { // description  type name = (_: {
  // field description  field: type, }) => any; }``), and a ``json_schema``
  response format as the schema's JSON under its name. Both are rendered
  here as that text and counted with the model's tokenizer.
- **Anthropic** puts the tools' JSON in a system prompt of its own, which
  costs ``ANTHROPIC_TOOL_PREAMBLE`` tokens more (its published figure for
  ``tool_choice`` auto, the larger of the two).

It is our count, not the upstream's: billing takes what the upstream
reports (``gateway/money/ceiling.py``), and this count sizes the
reservation, so a few per cent either way moves no money.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from classifiers.images import ANTHROPIC, OPENAI
from classifiers.length import TokenCounter

ANTHROPIC_TOOL_PREAMBLE = 346
SCHEMA_FRAMING = 8          # "# Response Formats", the name and the lines around them
MAX_TYPE_DEPTH = 8          # deeper schemas are rendered as their JSON


def _type(schema: Any, depth: int = 0) -> str:
    """A JSON schema as a TypeScript type, as OpenAI renders a tool's parameters."""
    if not isinstance(schema, Mapping):
        return "any"
    if depth >= MAX_TYPE_DEPTH:
        return orjson.dumps(schema).decode()
    if "enum" in schema and isinstance(schema["enum"], list):
        return " | ".join(orjson.dumps(v).decode() for v in schema["enum"]) or "never"
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(_type(s, depth + 1) for s in schema[key]) or "any"
    kind = schema.get("type")
    if kind == "array":
        return f"{_type(schema.get('items'), depth + 1)}[]"
    if kind == "object" or "properties" in schema:
        return "{\n" + _fields(schema, depth + 1) + "}"
    if kind == "integer":
        return "number"
    return kind if isinstance(kind, str) else "any"


def _fields(schema: Mapping[str, Any], depth: int) -> str:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return ""
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    lines = []
    for name, prop in properties.items():
        about = prop.get("description") if isinstance(prop, Mapping) else None
        if isinstance(about, str) and about:
            lines.append(f"// {about}\n")
        optional = "" if name in required else "?"
        lines.append(f"{name}{optional}: {_type(prop, depth)},\n")
    return "".join(lines)


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any] | None:
    fn = tool.get("function") if tool.get("type", "function") == "function" else tool.get("custom")
    return fn if isinstance(fn, Mapping) else None


def tools_text(tools: list[Any]) -> str:
    """OpenAI's rendering of function (and custom) tools into the system message."""
    out = ["# Tools\n\n## functions\n\nnamespace functions {\n\n"]
    for tool in tools:
        fn = _function(tool) if isinstance(tool, Mapping) else None
        if fn is None:
            out.append(orjson.dumps(tool).decode() + "\n")
            continue
        about = fn.get("description")
        if isinstance(about, str) and about:
            out.append(f"// {about}\n")
        params = fn.get("parameters")
        args = f"(_: {_type(params)}) => any" if params else "() => any"
        out.append(f"type {fn.get('name') or ''} = {args};\n\n")
    out.append("} // namespace functions")
    return "".join(out)


def schema_text(response_format: Any) -> str:
    """The response format's schema as the model reads it ("" for text and json_object)."""
    if not isinstance(response_format, Mapping) or response_format.get("type") != "json_schema":
        return ""
    spec = response_format.get("json_schema")
    if not isinstance(spec, Mapping):
        return ""
    schema = spec.get("schema")
    return f"{spec.get('name') or ''}\n{orjson.dumps(schema).decode() if schema else '{}'}"


def structured_tokens(body: Mapping[str, Any], counter: TokenCounter, rule: str = OPENAI) -> int:
    """Tokens of the body's ``tools`` and ``response_format`` schema, as ``rule``'s models
    read them; 0 for a request with neither (the usual chat request, at once)."""
    tools, fmt = body.get("tools"), body.get("response_format")
    total = 0
    if isinstance(tools, list) and tools:
        if rule == ANTHROPIC:
            total += ANTHROPIC_TOOL_PREAMBLE + counter.count_text(orjson.dumps(tools).decode())
        else:
            total += counter.count_text(tools_text(tools))
    if fmt is not None:
        text = schema_text(fmt)
        if text:
            total += SCHEMA_FRAMING + counter.count_text(text)
    return total

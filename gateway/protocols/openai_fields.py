"""The structured fields of an OpenAI request, checked before any upstream call.

    check_structured_fields(body)      # raises InvalidRequest naming the field, or returns

``tools``, ``tool_choice`` and ``response_format`` drive the gateway's own
answer checks (escalation) and the simulator, and a malformed one used to
crash them after the upstream had already answered: the work went unbilled
and the SDK retried it twice more. These schemas are OpenAI's own shapes
(``shared/specs/openai-openapi.yaml``: ``ChatCompletionTool``,
``CustomToolChatCompletions``, ``ChatCompletionToolChoiceOption``,
``ResponseFormat*``), checked with ``jsonschema``; each validator is built
once and only runs when the field is present.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema

from core.errors import InvalidRequest

_NAME = {"type": "string", "minLength": 1, "maxLength": 128}
_OBJECT = {"type": "object"}
_FUNCTION_TOOL = {
    "type": "object", "required": ["type", "function"],
    "properties": {
        "type": {"const": "function"},
        "function": {"type": "object", "required": ["name"], "properties": {
            "name": _NAME, "description": {"type": "string"}, "parameters": _OBJECT,
            "strict": {"type": ["boolean", "null"]}}},
    },
}
_CUSTOM_TOOL = {
    "type": "object", "required": ["type", "custom"],
    "properties": {"type": {"const": "custom"},
                   "custom": {"type": "object", "required": ["name"],
                              "properties": {"name": _NAME}}},
}
_TOOLS = {"type": "array", "maxItems": 512, "items": {"oneOf": [_FUNCTION_TOOL, _CUSTOM_TOOL]}}
_NAMED = {"type": "object", "required": ["name"], "properties": {"name": _NAME}}
_TOOL_CHOICE = {"oneOf": [
    {"enum": ["none", "auto", "required"]},
    {"type": "object", "required": ["type", "function"],
     "properties": {"type": {"const": "function"}, "function": _NAMED}},
    {"type": "object", "required": ["type", "custom"],
     "properties": {"type": {"const": "custom"}, "custom": _NAMED}},
    {"type": "object", "required": ["type", "allowed_tools"],
     "properties": {"type": {"const": "allowed_tools"}, "allowed_tools": {
         "type": "object", "required": ["mode", "tools"],
         "properties": {"mode": {"enum": ["auto", "required"]},
                        "tools": {"type": "array", "items": _OBJECT}}}}},
]}
_RESPONSE_FORMAT = {"oneOf": [
    {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["text", "json_object"]}}},
    {"type": "object", "required": ["type", "json_schema"], "properties": {
        "type": {"const": "json_schema"},
        "json_schema": {"type": "object", "required": ["name"], "properties": {
            "name": _NAME, "description": {"type": "string"}, "schema": _OBJECT,
            "strict": {"type": ["boolean", "null"]}}}}},
]}

_VALIDATORS = {name: jsonschema.Draft202012Validator(schema) for name, schema in (
    ("tools", _TOOLS), ("tool_choice", _TOOL_CHOICE), ("response_format", _RESPONSE_FORMAT))}


def _where(error: jsonschema.ValidationError, field: str) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return field + path


def check_structured_fields(body: Mapping[str, Any]) -> None:
    """Refuse a malformed ``tools``, ``tool_choice`` or ``response_format`` with a 400."""
    if "tools" not in body and "tool_choice" not in body and "response_format" not in body:
        return      # the usual request: nothing to check
    for field, validator in _VALIDATORS.items():
        value = body.get(field)
        if value is None:
            continue
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is not None:
            raise InvalidRequest(f"Invalid '{_where(error, field)}': {error.message}",
                                 param=_where(error, field))

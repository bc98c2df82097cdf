"""The shape of an Anthropic Messages request, checked before it is translated.

    check_request(body)                  # raises InvalidRequest naming the field, or returns
    check_request(body, counting=True)   # a count_tokens body: no max_tokens

Anthropic's own field rules (``POST /v1/messages``: ``model``, ``max_tokens``
and ``messages`` required, ``temperature`` and ``top_p`` within 0..1, content
blocks by ``type``), written as JSON schema and checked with ``jsonschema``,
so the translation in ``parse.py`` can trust the shapes it reads. Block
types this schema does not know are left for ``parse.py`` to refuse by name.
Paths in messages are Anthropic's own (``messages.0.content.1.text``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema

from core.errors import InvalidRequest

_STRING = {"type": "string"}
_TEXT = {"required": ["text"], "properties": {"text": _STRING}}
_IMAGE_SOURCE = {
    "type": "object", "required": ["type"],
    "properties": {"type": {"enum": ["base64", "url"]}},
    "allOf": [
        {"if": {"properties": {"type": {"const": "base64"}}},
         "then": {"required": ["media_type", "data"], "properties": {
             "media_type": {"enum": ["image/jpeg", "image/png", "image/gif", "image/webp"]},
             "data": _STRING}}},
        {"if": {"properties": {"type": {"const": "url"}}},
         "then": {"required": ["url"], "properties": {"url": _STRING}}},
    ],
}
_IMAGE = {"required": ["source"], "properties": {"source": _IMAGE_SOURCE}}


def _by_type(kinds: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A block: an object with a string ``type``, and ``kinds[type]``'s fields."""
    return {"type": "object", "required": ["type"], "properties": {"type": _STRING},
            "allOf": [{"if": {"properties": {"type": {"const": name}}}, "then": schema}
                      for name, schema in kinds.items()]}


_RESULT_BLOCK = _by_type({"text": _TEXT, "image": _IMAGE})
_DOCUMENT = {"required": ["source"], "properties": {
    "source": {"type": "object", "required": ["type"], "properties": {
        "type": {"enum": ["text", "content", "base64", "url", "file"]}}},
    "title": {"type": ["string", "null"]}, "context": {"type": ["string", "null"]}}}
_BLOCK = _by_type({
    "text": _TEXT,
    "image": _IMAGE,
    "document": _DOCUMENT,
    "tool_use": {"required": ["id", "name", "input"], "properties": {
        "id": _STRING, "name": _STRING, "input": {"type": "object"}}},
    "tool_result": {"required": ["tool_use_id"], "properties": {
        "tool_use_id": _STRING, "is_error": {"type": "boolean"},
        "content": {"type": ["string", "array"], "items": _RESULT_BLOCK}}},
})
_MESSAGE = {"type": "object", "required": ["role", "content"], "properties": {
    "role": {"enum": ["user", "assistant"]},
    "content": {"type": ["string", "array"], "items": _BLOCK}}}
_TOOL = {
    "type": "object", "required": ["name"],
    "properties": {"name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,128}$"},
                   "description": _STRING, "input_schema": {"type": "object"},
                   "type": _STRING},
    # A custom tool (``type`` absent or "custom") must say what its input is.
    "if": {"properties": {"type": {"const": "custom"}}}, "then": {"required": ["input_schema"]},
}
_TOOL_CHOICE = {
    "type": "object", "required": ["type"],
    "properties": {"type": {"enum": ["auto", "any", "tool", "none"]}, "name": _STRING,
                   "disable_parallel_tool_use": {"type": "boolean"}},
    "if": {"properties": {"type": {"const": "tool"}}}, "then": {"required": ["name"]},
}
_UNIT = {"type": "number", "minimum": 0, "maximum": 1}
_REQUEST = {
    "type": "object", "required": ["model", "max_tokens", "messages"],
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "max_tokens": {"type": "integer", "minimum": 1},
        "messages": {"type": "array", "minItems": 1, "items": _MESSAGE},
        "system": {"type": ["string", "array"], "items": _by_type({"text": _TEXT})},
        "stop_sequences": {"type": "array", "items": _STRING},
        "stream": {"type": "boolean"},
        "temperature": _UNIT,
        "top_p": _UNIT,
        "top_k": {"type": "integer", "minimum": 0},
        "metadata": {"type": "object", "properties": {"user_id": {"type": ["string", "null"]}}},
        "tools": {"type": "array", "items": _TOOL},
        "tool_choice": _TOOL_CHOICE,
        "thinking": {"type": "object"},
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(_REQUEST)
# count_tokens takes the same request without max_tokens (nothing is generated).
_COUNT_VALIDATOR = jsonschema.Draft202012Validator({**_REQUEST, "required": ["model", "messages"]})


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path)


def check_request(body: Mapping[str, Any], *, counting: bool = False) -> None:
    """Refuse a request Anthropic's API would refuse for its shape, with a 400.
    ``counting``: a count_tokens request, which has no max_tokens."""
    validator = _COUNT_VALIDATOR if counting else _VALIDATOR
    error = jsonschema.exceptions.best_match(validator.iter_errors(body))
    if error is None:
        return
    where = _where(error)
    if error.validator == "required":
        # "'max_tokens' is a required property" says it best without a path.
        raise InvalidRequest(f"{where + ': ' if where else ''}{error.message}",
                             param=where or None, code="missing_required_parameter")
    raise InvalidRequest(f"{where}: {error.message}", param=where or None)

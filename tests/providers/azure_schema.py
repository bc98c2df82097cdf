"""What Azure OpenAI accepts in a chat or embeddings body, strictly: a JSON Schema per
api-version, and the checks a schema cannot state.

    problem = chat_problem(body, "2024-10-21")     # None, or (message, param)

Built from the published inference spec (azure-rest-api-specs,
``inference/stable/2024-10-21/inference.json``: ``createChatCompletionRequest``
and ``chatCompletionsRequestCommon``) and OpenAI's own validation messages. An
unknown member anywhere is refused, as Azure refuses an unrecognized argument.
``stream_options`` is taken from 2024-09-01-preview on, ``developer`` messages
from 2024-12-01-preview on; older versions refuse them.
"""

from __future__ import annotations

from typing import Any

import jsonschema

KNOWN_VERSIONS = frozenset({
    "2023-05-15", "2024-02-01", "2024-06-01", "2024-10-21",
    "2024-08-01-preview", "2024-09-01-preview", "2024-10-01-preview", "2024-12-01-preview",
    "2025-01-01-preview", "2025-03-01-preview", "2025-04-01-preview"})


def _closed(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


STRING = {"type": "string"}
TEXT_PART = _closed({"type": {"const": "text"}, "text": STRING}, ["type", "text"])
IMAGE_PART = _closed({"type": {"const": "image_url"}, "image_url": _closed(
    {"url": STRING, "detail": {"enum": ["auto", "low", "high"]}}, ["url"])},
    ["type", "image_url"])
REFUSAL_PART = _closed({"type": {"const": "refusal"}, "refusal": STRING}, ["type", "refusal"])


def _content(*parts: dict[str, Any], nullable: bool = False) -> dict[str, Any]:
    options: list[dict[str, Any]] = [STRING, {"type": "array", "minItems": 1,
                                              "items": {"anyOf": list(parts)}}]
    if nullable:
        options.append({"type": "null"})
    return {"anyOf": options}


TOOL_CALL = _closed({"id": STRING, "type": {"const": "function"}, "function": _closed(
    {"name": STRING, "arguments": STRING}, ["name", "arguments"])}, ["id", "type", "function"])
NAME = {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"}


def _messages(roles: list[str]) -> dict[str, Any]:
    system = _closed({"role": {"enum": roles}, "content": _content(TEXT_PART), "name": STRING},
                     ["role", "content"])
    user = _closed({"role": {"const": "user"}, "content": _content(TEXT_PART, IMAGE_PART),
                    "name": STRING}, ["role", "content"])
    assistant = _closed({"role": {"const": "assistant"},
                         "content": _content(TEXT_PART, REFUSAL_PART, nullable=True),
                         "refusal": {"type": ["string", "null"]}, "name": STRING,
                         "tool_calls": {"type": "array", "items": TOOL_CALL}}, ["role"])
    tool = _closed({"role": {"const": "tool"}, "content": _content(TEXT_PART),
                    "tool_call_id": STRING}, ["role", "content", "tool_call_id"])
    return {"type": "array", "minItems": 1, "items": {"oneOf": [system, user, assistant, tool]}}


TOOL = _closed({"type": {"const": "function"}, "function": _closed(
    {"name": NAME, "description": STRING, "parameters": {"type": "object"},
     "strict": {"type": ["boolean", "null"]}}, ["name"])}, ["type", "function"])
RESPONSE_FORMAT = {"oneOf": [
    _closed({"type": {"const": "text"}}, ["type"]),
    _closed({"type": {"const": "json_object"}}, ["type"]),
    _closed({"type": {"const": "json_schema"}, "json_schema": _closed(
        {"name": NAME, "description": STRING, "schema": {"type": "object"},
         "strict": {"type": ["boolean", "null"]}}, ["name"])}, ["type", "json_schema"])]}
TOOL_CHOICE = {"anyOf": [{"enum": ["none", "auto", "required"]}, _closed(
    {"type": {"const": "function"}, "function": _closed({"name": STRING}, ["name"])},
    ["type", "function"])]}
PENALTY = {"type": ["number", "null"], "minimum": -2, "maximum": 2}


def chat_schema(version: str) -> dict[str, Any]:
    dated = version[:10]
    roles = ["system", "developer"] if dated >= "2024-12-01" else ["system"]
    properties: dict[str, Any] = {
        "messages": _messages(roles), "model": STRING, "data_sources": {"type": "array"},
        "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
        "top_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
        "stream": {"type": ["boolean", "null"]},
        "stop": {"anyOf": [{"type": ["string", "null"]},
                           {"type": "array", "minItems": 1, "maxItems": 4, "items": STRING}]},
        "max_tokens": {"type": ["integer", "null"], "minimum": 1},
        "max_completion_tokens": {"type": ["integer", "null"], "minimum": 1},
        "presence_penalty": PENALTY, "frequency_penalty": PENALTY,
        "logit_bias": {"type": ["object", "null"]}, "user": STRING,
        "logprobs": {"type": ["boolean", "null"]},
        "top_logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 20},
        "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 128},
        "parallel_tool_calls": {"type": ["boolean", "null"]},
        "response_format": RESPONSE_FORMAT,
        "seed": {"type": ["integer", "null"]},
        "tools": {"type": "array", "maxItems": 128, "items": TOOL},
        "tool_choice": TOOL_CHOICE,
    }
    if dated >= "2024-09-01":
        properties["stream_options"] = _closed({"include_usage": {"type": "boolean"}}, [])
    return _closed(properties, ["messages"])


EMBEDDINGS_SCHEMA = _closed({
    "input": {"anyOf": [STRING, {"type": "array", "minItems": 1, "maxItems": 2048,
                                 "items": {"type": "string", "minLength": 1}}]},
    "model": STRING, "user": STRING, "input_type": STRING,
    "encoding_format": {"enum": ["float", "base64", None]},
    "dimensions": {"type": ["integer", "null"], "minimum": 1}}, ["input"])


def _param(error: jsonschema.ValidationError) -> str:
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(body)"


def schema_problem(body: Any, schema: dict[str, Any]) -> tuple[str, str] | None:
    if not isinstance(body, dict):
        return "The request body must be a JSON object.", "(body)"
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema)
                                             .iter_errors(body))
    if error is None:
        return None
    if error.validator == "additionalProperties":
        return f"Unrecognized request argument supplied: {error.message}", _param(error)
    return f"Invalid value for '{_param(error)}': {error.message}", _param(error)


def chat_problem(body: Any, version: str) -> tuple[str, str] | None:
    """Why Azure would refuse this chat body (message, param); None if it would not."""
    problem = schema_problem(body, chat_schema(version))
    if problem is not None:
        return problem
    if body.get("max_tokens") is not None and body.get("max_completion_tokens") is not None:
        return ("Setting 'max_tokens' and 'max_completion_tokens' at the same time is not "
                "supported.", "max_tokens")
    if body.get("stream_options") is not None and not body.get("stream"):
        return ("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                "stream_options")
    if body.get("top_logprobs") is not None and not body.get("logprobs"):
        return "'top_logprobs' requires 'logprobs' to be true.", "top_logprobs"
    return _tool_problem(body)


def _tool_problem(body: dict[str, Any]) -> tuple[str, str] | None:
    names = {t["function"]["name"] for t in body.get("tools") or []}
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice["function"]["name"] not in names:
        return (f"Invalid value for 'tool_choice': no function named "
                f"'{choice['function']['name']}' was specified in the 'tools' parameter.",
                "tool_choice")
    if choice is not None and not names:
        return "'tool_choice' is only allowed when 'tools' are specified.", "tool_choice"
    called: set[str] = set()
    for i, message in enumerate(body["messages"]):
        if message["role"] == "assistant":
            called = {c["id"] for c in message.get("tool_calls") or []}
            if message.get("content") is None and not called:
                return (f"Invalid value for 'messages[{i}].content': content is required "
                        "unless tool_calls are given.", f"messages[{i}].content")
        elif message["role"] == "tool":
            if message["tool_call_id"] not in called:
                return ("Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.", f"messages[{i}].role")
        else:
            called = set()
    return None

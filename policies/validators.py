"""Is this answer usable for the request that asked for it? Pure functions.

    reason = check_answer(request_body, message, finish_reason, token_logprobs,
                          min_logprob=-1.5)
    # None: usable; else why not: "invalid_json", "schema_violation",
    # "invalid_tool_call", "tool_choice_violated", "truncated", "low_logprob"

The escalation loop calls this after every attempt: an answer the client
could not use (JSON that does not parse, arguments that break the declared
schema, structured output cut off at max_tokens) goes one model up instead
of to the client. Schemas are checked with ``jsonschema``; a compiled
validator is cached per schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import jsonschema
import orjson

INVALID_JSON = "invalid_json"
SCHEMA_VIOLATION = "schema_violation"
INVALID_TOOL_CALL = "invalid_tool_call"
TOOL_CHOICE_VIOLATED = "tool_choice_violated"
TRUNCATED = "truncated"
LOW_LOGPROB = "low_logprob"
# Verdicts that say the model could not answer this prompt (labels for
# ``routegate learn``): every refusal, a truncated one too (the rung above
# answered within the same cap).
FAILED_ANSWER = frozenset({INVALID_JSON, SCHEMA_VIOLATION, INVALID_TOOL_CALL, TRUNCATED,
                           TOOL_CHOICE_VIOLATED, LOW_LOGPROB})


def _strict(schema: Any) -> Any:
    """OpenAI's strict mode: objects allow no properties beyond those declared."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (out.get("type") == "object" or "properties" in out) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


@lru_cache(maxsize=256)
def _validator(schema_json: bytes, strict: bool) -> Any:
    schema = orjson.loads(schema_json)
    if strict:
        schema = _strict(schema)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_against(value: Any, schema: Any, *, strict: bool = False) -> bool:
    """Whether ``value`` satisfies ``schema``; a schema that is itself invalid
    cannot be checked, so it passes (the upstream was the judge of it)."""
    try:
        key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
        validator = _validator(key, strict)
    except (jsonschema.SchemaError, orjson.JSONEncodeError, TypeError):
        return True
    return bool(validator.is_valid(value))


def _parse(text: Any) -> tuple[bool, Any]:
    if not isinstance(text, str):
        return False, None
    try:
        return True, orjson.loads(text)
    except orjson.JSONDecodeError:
        return False, None


def check_json_object(content: Any) -> str | None:
    ok, value = _parse(content)
    return None if ok and isinstance(value, dict) else INVALID_JSON


def check_json_schema(content: Any, json_schema: Mapping[str, Any]) -> str | None:
    ok, value = _parse(content)
    if not ok:
        return INVALID_JSON
    schema = json_schema.get("schema")
    if schema is None:
        return None
    return None if validate_against(value, schema, strict=bool(json_schema.get("strict"))) else (
        SCHEMA_VIOLATION)


def _declared(tools: Sequence[Any]) -> dict[str, Any]:
    out = {}
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out[fn["name"]] = fn
    return out


def check_tool_calls(tool_calls: Any, tools: Sequence[Any], tool_choice: Any) -> str | None:
    """Every call names a declared function with arguments valid for it, and
    ``tool_choice`` ("none", "required", or one named function) is respected."""
    calls = tool_calls if isinstance(tool_calls, list) else []
    if tool_choice == "none":
        return TOOL_CHOICE_VIOLATED if calls else None
    forced = None
    if isinstance(tool_choice, dict):
        forced = (tool_choice.get("function") or {}).get("name")
    if (tool_choice == "required" or forced) and not calls:
        return TOOL_CHOICE_VIOLATED
    declared = _declared(tools)
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or fn.get("name") not in declared:
            return INVALID_TOOL_CALL
        if forced and fn["name"] != forced:
            return TOOL_CHOICE_VIOLATED
        ok, args = _parse(fn.get("arguments"))
        if not ok or not isinstance(args, dict):
            return INVALID_TOOL_CALL
        spec = declared[fn["name"]]
        parameters = spec.get("parameters")
        if parameters and not validate_against(args, parameters, strict=bool(spec.get("strict"))):
            return INVALID_TOOL_CALL
    return None


def mean_logprob(token_logprobs: Sequence[float]) -> float | None:
    return sum(token_logprobs) / len(token_logprobs) if token_logprobs else None


def is_structured(request: Mapping[str, Any]) -> bool:
    """Whether the request asked for output a program will parse."""
    fmt = request.get("response_format")
    return bool(request.get("tools")) or (
        isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"))


def check_answer(request: Mapping[str, Any], message: Mapping[str, Any],
                 finish_reason: str | None, token_logprobs: Sequence[float] = (), *,
                 min_logprob: float | None = None) -> str | None:
    """Why the answer to ``request`` is unusable, or None when it is usable."""
    structured = is_structured(request)
    if structured and finish_reason == "length":
        return TRUNCATED
    tools = request.get("tools") or []
    if tools and (message.get("tool_calls") or request.get("tool_choice") not in (None, "auto")):
        reason = check_tool_calls(message.get("tool_calls"), tools, request.get("tool_choice"))
        if reason:
            return reason
    elif tools and not message.get("tool_calls") and not message.get("content"):
        return INVALID_TOOL_CALL
    fmt = request.get("response_format")
    if isinstance(fmt, dict) and not message.get("tool_calls"):
        if fmt.get("type") == "json_object":
            reason = check_json_object(message.get("content"))
        elif fmt.get("type") == "json_schema":
            reason = check_json_schema(message.get("content"), fmt.get("json_schema") or {})
        else:
            reason = None
        if reason:
            return reason
    if min_logprob is not None:
        mean = mean_logprob(token_logprobs)
        if mean is not None and mean < min_logprob:
            return LOW_LOGPROB
    return None

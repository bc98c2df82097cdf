"""The answer checks behind escalation: pure functions, no network."""

from __future__ import annotations

import pytest

from policies.validators import (
    INVALID_JSON,
    INVALID_TOOL_CALL,
    LOW_LOGPROB,
    SCHEMA_VIOLATION,
    TOOL_CHOICE_VIOLATED,
    TRUNCATED,
    check_answer,
    check_json_object,
    check_json_schema,
    check_tool_calls,
    mean_logprob,
)

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "temp": {"type": "number"}},
          "required": ["city", "temp"]}
WEATHER = {"type": "function", "function": {"name": "weather", "parameters": SCHEMA}}


def call(name: str, arguments: str) -> dict:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize("content, ok", [
    ('{"a": 1}', True), ("[1, 2]", False), ('{"a": ', False), (None, False), ("", False)])
def test_json_object(content: object, ok: bool) -> None:
    assert (check_json_object(content) is None) is ok
    if not ok:
        assert check_json_object(content) == INVALID_JSON


def test_json_schema_checks_types_and_required() -> None:
    spec = {"name": "w", "schema": SCHEMA}
    assert check_json_schema('{"city": "Oslo", "temp": 3.5}', spec) is None
    assert check_json_schema('{"city": "Oslo"}', spec) == SCHEMA_VIOLATION
    assert check_json_schema('{"city": 1, "temp": 2}', spec) == SCHEMA_VIOLATION
    assert check_json_schema('{"city": "Oslo", "temp"', spec) == INVALID_JSON


def test_strict_refuses_undeclared_properties() -> None:
    extra = '{"city": "Oslo", "temp": 3, "wind": 9}'
    assert check_json_schema(extra, {"schema": SCHEMA}) is None
    assert check_json_schema(extra, {"schema": SCHEMA, "strict": True}) == SCHEMA_VIOLATION


def test_an_invalid_schema_cannot_fail_an_answer() -> None:
    assert check_json_schema('{"a": 1}', {"schema": {"type": 12}}) is None


def test_tool_calls_must_name_a_declared_function_with_valid_arguments() -> None:
    good = call("weather", '{"city": "Oslo", "temp": 1}')
    assert check_tool_calls([good], [WEATHER], "auto") is None
    assert check_tool_calls([call("nope", "{}")], [WEATHER], "auto") == INVALID_TOOL_CALL
    assert check_tool_calls([call("weather", '{"city": ')], [WEATHER], "auto") == INVALID_TOOL_CALL
    assert check_tool_calls([call("weather", '{"city": "Oslo"}')], [WEATHER],
                            "auto") == INVALID_TOOL_CALL


def test_tool_choice_is_respected() -> None:
    good = call("weather", '{"city": "Oslo", "temp": 1}')
    other = {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}
    assert check_tool_calls([good], [WEATHER], "none") == TOOL_CHOICE_VIOLATED
    assert check_tool_calls([], [WEATHER], "required") == TOOL_CHOICE_VIOLATED
    forced = {"type": "function", "function": {"name": "other"}}
    assert check_tool_calls([good], [WEATHER, other], forced) == TOOL_CHOICE_VIOLATED
    assert check_tool_calls([call("other", "{}")], [WEATHER, other], forced) is None


def test_check_answer_truncated_structured_output() -> None:
    request = {"response_format": {"type": "json_object"}}
    assert check_answer(request, {"content": '{"a": 1}'}, "length") == TRUNCATED
    assert check_answer(request, {"content": '{"a": 1}'}, "stop") is None
    assert check_answer({}, {"content": "plain text"}, "length") is None   # not structured


def test_check_answer_tools_and_formats() -> None:
    request = {"tools": [WEATHER], "tool_choice": "required"}
    assert check_answer(request, {"content": None}, "stop") == TOOL_CHOICE_VIOLATED
    msg = {"content": None, "tool_calls": [call("weather", '{"city": "Oslo", "temp": 1}')]}
    assert check_answer(request, msg, "tool_calls") is None
    schema = {"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}}
    assert check_answer(schema, {"content": '{"city": "x"}'}, "stop") == SCHEMA_VIOLATION


def test_low_logprob() -> None:
    assert mean_logprob([-0.5, -1.5]) == -1.0
    assert mean_logprob([]) is None
    assert check_answer({}, {"content": "x"}, "stop", [-3.0, -2.0], min_logprob=-1.0) == LOW_LOGPROB
    assert check_answer({}, {"content": "x"}, "stop", [-0.1], min_logprob=-1.0) is None
    assert check_answer({}, {"content": "x"}, "stop", [-3.0]) is None    # not asked

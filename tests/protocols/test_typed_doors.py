"""A body that validates can always be read: every body one change away from a rich one
is either served or a 400 naming the field, never another exception (no KeyError, TypeError,
500), on the Messages and the Responses doors.

Each rich body below exercises every kind of block, item, tool and choice its door reads;
``mutations`` changes one thing in it at a time: each value replaced by each of ``ODD``
(wrong types, bounds, empty, huge, nested deep), each field dropped, each object's
``type`` swapped for every kind either door knows. No network: the doors' pure parses.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from core.errors import InvalidRequest
from gateway.protocols.anthropic_messages.count import count_input_tokens
from gateway.protocols.anthropic_messages.parse import messages_request
from gateway.protocols.chat_body import chat_request
from gateway.protocols.openai_responses.model import read_request
from gateway.protocols.openai_responses.parse import translate

Path = tuple[int | str, ...]
PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"k": value}
    return value


ODD: list[Any] = [None, True, False, 0, -1, 1.5, 10**30, "", "x", "auto", [], [None], [[]], {},
                  {"type": None}, {"type": 5}, {"type": "zzz"}, [{"type": "text"}], deep(300),
                  "y" * 10_000]
KINDS = ["text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking",
         "base64", "url", "content", "file", "custom", "auto", "any", "none", "tool", "message",
         "function_call", "function_call_output", "reasoning", "input_text", "output_text",
         "refusal", "input_image", "input_file", "function", "allowed_tools", "json_object",
         "json_schema", "web_search", "bash_20250124", "search_result"]

MESSAGES = {
    "model": "fast", "max_tokens": 64, "temperature": 0.5, "top_p": 0.9, "top_k": 5,
    "stop_sequences": ["END"], "stream": True, "metadata": {"user_id": "u-1"},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "system": [{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}],
    "tools": [{"name": "get_weather", "description": "Weather", "input_schema": SCHEMA},
              {"type": "custom", "name": "now", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "Look:"}, {"type": "image", "source": PNG},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            {"type": "document", "title": "Memo", "context": "c",
             "source": {"type": "text", "media_type": "text/plain", "data": "Ship Friday."}},
            {"type": "document", "source": {"type": "content", "content": [
                {"type": "text", "text": "Part one."}]}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "sig"},
            {"type": "redacted_thinking", "data": "xx"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": False,
             "content": [{"type": "text", "text": "18C"}]},
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "again"},
            {"type": "text", "text": "Warm?"}]},
        {"role": "assistant", "content": "Yes."},
    ],
}

RESPONSES = {
    "model": "fast", "instructions": "Be brief.", "max_output_tokens": 50, "temperature": 0.2,
    "top_p": 0.9, "user": "u1", "stream": False, "store": False, "parallel_tool_calls": True,
    "metadata": {"k": "v"}, "include": [], "truncation": "disabled", "background": False,
    "tools": [{"type": "function", "name": "get_weather", "description": "Weather",
               "parameters": SCHEMA, "strict": True}],
    "tool_choice": {"type": "allowed_tools", "mode": "auto",
                    "tools": [{"type": "function", "name": "get_weather"}]},
    "text": {"format": {"type": "json_schema", "name": "w", "schema": SCHEMA, "strict": True},
             "verbosity": "low"},
    "input": [
        {"role": "developer", "content": "rules"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "what?"},
            {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "low"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Let me look.", "annotations": []},
            {"type": "refusal", "refusal": "no"}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1",
         "output": [{"type": "input_text", "text": "sunny"}]},
    ],
}


def positions(value: Any, path: Path = ()) -> Iterator[Path]:
    """Every place in ``value`` a field or an item sits, outermost first."""
    items: Any = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, inner in items:
        yield (*path, key)
        yield from positions(inner, (*path, key))


def changed(body: dict[str, Any], path: Path, value: Any = ..., *, drop: bool = False
            ) -> dict[str, Any]:
    out = copy.deepcopy(body)
    parent: Any = out          # an object or an array, by the path's steps
    for step in path[:-1]:
        parent = parent[step]
    if drop:
        del parent[path[-1]]
    else:
        parent[path[-1]] = copy.deepcopy(value)
    return out


def mutations(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(what changed, the body) for every body one change away from ``body``."""
    for path in positions(body):
        where = ".".join(map(str, path))
        for odd in ODD:
            yield f"{where} = {odd!r:.40}", changed(body, path, odd)
        yield f"drop {where}", changed(body, path, drop=True)
        if path[-1] == "type":
            for kind in KINDS:
                yield f"{where} = {kind!r}", changed(body, path, kind)
    yield "an unknown field", {**body, "zzz_unknown": 1}


def served_or_refused(read: Any, body: dict[str, Any], label: str) -> bool:
    """True when served, False when refused with a clear 400; anything else fails the test."""
    try:
        read(body)
    except InvalidRequest as exc:
        assert exc.status_code == 400, label
        assert "type=" not in exc.message and "json=" not in exc.message, (label, exc.message)
        assert len(exc.message) < 600, (label, exc.message)
        return False
    return True


def read_messages(body: dict[str, Any]) -> None:
    messages_request(body, {})


def count_messages(body: dict[str, Any]) -> None:
    assert count_input_tokens(body, "o200k_base") > 0


def read_responses(body: dict[str, Any]) -> None:
    request = read_request(body)
    chat, _ = translate(request, body, [], response_id="resp_x", created_at=1)
    chat_request(chat, {})


@pytest.mark.parametrize(("door", "rich", "read"), [
    ("messages", MESSAGES, read_messages),
    ("count_tokens", {k: v for k, v in MESSAGES.items() if k != "max_tokens"}, count_messages),
    ("responses", RESPONSES, read_responses),
])
def test_every_body_one_change_away_is_served_or_a_400(door: str, rich: dict[str, Any],
                                                         read: Any) -> None:
    assert served_or_refused(read, rich, f"{door}: the rich body")
    outcomes = [served_or_refused(read, body, f"{door}: {label}")
                for label, body in mutations(rich)]
    # Both outcomes are common: the mutations reach the translation, not only the schema.
    assert len(outcomes) > 1500 and 0.1 < sum(outcomes) / len(outcomes) < 0.9, (
        len(outcomes), sum(outcomes))

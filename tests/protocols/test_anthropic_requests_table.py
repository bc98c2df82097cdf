"""The Messages door's request translation, more named cases: Anthropic body in, chat body out.

``test_anthropic_translation.py`` holds the first table (system prompts, tool round trips,
tool_choice, images, documents); these are the cases the typed reading decides: blocks
dropped or joined, optional fields absent or null, the count_tokens body, the edges of the
numeric bounds. Pure: the door's own ``read_request`` and ``to_chat_body``, no server.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.protocols.anthropic_messages.model import read_count_request, read_request
from gateway.protocols.anthropic_messages.parse import to_chat_body

HI = {"role": "user", "content": "Hi"}
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
SEARCH = {"name": "search", "input_schema": SCHEMA}
CHAT_SEARCH = {"type": "function", "function": {"name": "search", "parameters": SCHEMA}}


def body(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "fast", "max_tokens": 32, "messages": list(messages or [HI]), **fields}


def chat(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "fast", "max_tokens": 32, "messages": list(messages or [HI]), **fields}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


CALL = {"type": "tool_use", "id": "toolu_9", "name": "search", "input": {"q": "tides"}}
CHAT_CALL = {"id": "toolu_9", "type": "function",
             "function": {"name": "search", "arguments": '{"q":"tides"}'}}

REQUESTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "thinking blocks sent back are dropped": (
        body(HI, assistant({"type": "thinking", "thinking": "hm", "signature": "s"},
                           {"type": "redacted_thinking", "data": "xx"}, text("Done."))),
        chat(HI, {"role": "assistant", "content": "Done."})),
    "an assistant turn of tool calls only has no content": (
        body(HI, assistant(CALL), tools=[SEARCH]),
        chat(HI, {"role": "assistant", "content": None, "tool_calls": [CHAT_CALL]},
             tools=[CHAT_SEARCH])),
    "assistant texts are joined by lines": (
        body(HI, assistant(text("One."), text("Two."))),
        chat(HI, {"role": "assistant", "content": "One.\nTwo."})),
    "text written before a tool result keeps its place": (
        body(user(text("First this."), {"type": "tool_result", "tool_use_id": "toolu_9",
                                         "content": "ok"}, text("Then this."))),
        chat({"role": "user", "content": "First this."},
             {"role": "tool", "tool_call_id": "toolu_9", "content": "ok"},
             {"role": "user", "content": "Then this."})),
    "a user turn of one tool result is one tool message": (
        body(user({"type": "tool_result", "tool_use_id": "toolu_9", "content": "ok"})),
        chat({"role": "tool", "tool_call_id": "toolu_9", "content": "ok"})),
    "a tool result without content is empty text": (
        body(user({"type": "tool_result", "tool_use_id": "toolu_9"})),
        chat({"role": "tool", "tool_call_id": "toolu_9", "content": ""})),
    "an error result says so in its text": (
        body(user({"type": "tool_result", "tool_use_id": "toolu_9", "is_error": True,
                   "content": "no network"})),
        chat({"role": "tool", "tool_call_id": "toolu_9", "content": "Error: no network"})),
    "an empty user turn is empty text": (body(user()), chat({"role": "user", "content": ""})),
    "a document by string content, titled": (
        body(user({"type": "document", "title": "Note", "context": None,
                   "source": {"type": "content", "content": "Call Ann."}})),
        chat({"role": "user", "content": "Note\n\nCall Ann."})),
    "an image and text keep their order": (
        body(user(text("Compare"), {"type": "image", "source": {
            "type": "base64", "media_type": "image/webp", "data": "UklGRg=="}})),
        chat({"role": "user", "content": [
            {"type": "text", "text": "Compare"},
            {"type": "image_url", "image_url": {"url": "data:image/webp;base64,UklGRg=="}}]})),
    "null optional fields are absent ones": (
        body(temperature=None, top_p=None, stop_sequences=None, metadata=None, system=None,
             tools=None, tool_choice=None, stream=None, top_k=None, thinking=None),
        chat()),
    "the numeric bounds' edges are served": (
        body(max_tokens=1, temperature=0, top_p=1, top_k=0), chat(max_tokens=1, temperature=0, top_p=1)),
    "a null user_id, an empty stop list and stream false send nothing": (
        body(metadata={"user_id": None}, stop_sequences=[], stream=False), chat()),
    "unknown fields are Anthropic's to add, not chat's": (
        body(service_tier="auto", container="c_1", mcp_servers=[]), chat()),
    "tool_choice any keeps parallel calls unless told": (
        body(tools=[SEARCH], tool_choice={"type": "any"}),
        chat(tools=[CHAT_SEARCH], tool_choice="required")),
    "tool_choice none with parallel calls disabled adds nothing": (
        body(tools=[SEARCH], tool_choice={"type": "none", "disable_parallel_tool_use": True}),
        chat(tools=[CHAT_SEARCH], tool_choice="none")),
    "an empty system prompt is none": (body(system=""), chat()),
}


@pytest.mark.parametrize("case", REQUESTS)
def test_a_messages_request_becomes_its_chat_body(case: str) -> None:
    anthropic_body, expected = REQUESTS[case]
    assert to_chat_body(read_request(anthropic_body)) == expected


COUNTED = {
    "no max_tokens": ({"model": "fast", "messages": [HI]},
                      {"model": "fast", "messages": [HI]}),
    "a system prompt and tools, as a request would have them": (
        {"model": "fast", "system": "Terse.", "messages": [HI], "tools": [SEARCH]},
        {"model": "fast", "messages": [{"role": "system", "content": "Terse."}, HI],
         "tools": [CHAT_SEARCH]}),
}


@pytest.mark.parametrize("case", COUNTED)
def test_a_count_tokens_body_becomes_the_chat_body_that_is_counted(case: str) -> None:
    anthropic_body, expected = COUNTED[case]
    assert to_chat_body(read_count_request(anthropic_body)) == expected

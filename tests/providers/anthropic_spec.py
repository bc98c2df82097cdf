"""What Anthropic's Messages API refuses, for the test server (``anthropic_server.py``).

    version = check_headers(headers, api_key)       # 401 / 400, as Anthropic answers them
    lints = check_request(body, version, MODELS)    # 400 naming the field; or the lints

Written from Anthropic's published API reference as the research notes
quote it (/work/notes/providers.md, section 1: the request's fields and
blocks, the limits Anthropic validates, the errors), never from the
gateway's code. A refusal is ``SpecError(status, type, message)``, which
the server answers as ``{"type": "error", "error": {"type", "message"}}``.

Consecutive turns of one role are *combined* by the API (the reference says
so), so they are accepted; like a first turn that is not the user's, they
come back as lints, which the ledger keeps and the tests read.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

VERSIONS = ("2023-06-01", "2026-10-21")
SAMPLING = frozenset({"temperature", "top_p", "top_k"})
TOP_FIELDS = frozenset({"model", "max_tokens", "messages", "system", "stop_sequences", "stream",
                        "metadata", "thinking", "tools", "tool_choice", "service_tier",
                        "output_config", "cache_control", "container", "inference_geo", "speed",
                        "diagnostics"}) | SAMPLING
BLOCK_FIELDS = {
    "text": {"type", "text", "cache_control", "citations"},
    "image": {"type", "source", "cache_control"},
    "document": {"type", "source", "title", "context", "citations", "cache_control"},
    "tool_use": {"type", "id", "name", "input", "cache_control"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
    "thinking": {"type", "thinking", "signature"},
    "redacted_thinking": {"type", "data"},
}
USER_BLOCKS = frozenset({"text", "image", "document", "tool_result"})
ASSISTANT_BLOCKS = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})
IMAGE_MAGIC = {"image/png": (b"\x89PNG\r\n\x1a\n",), "image/jpeg": (b"\xff\xd8\xff",),
               "image/gif": (b"GIF87a", b"GIF89a"), "image/webp": (b"RIFF",)}
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")
MAX_BREAKPOINTS, MAX_IMAGES = 4, 100


class SpecError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def refuse(message: str) -> SpecError:
    return SpecError(400, "invalid_request_error", message)


def check_headers(headers: Mapping[str, str], api_key: str) -> str:
    """The API version asked for; 401 for a missing or wrong key (``x-api-key``, or
    ``authorization: Bearer`` as SDK 2.x sends it), 400 for a missing version."""
    key = headers.get("x-api-key")
    bearer = headers.get("authorization", "")
    if key is None and bearer.lower().startswith("bearer "):
        key = bearer[7:]
    if key is None:
        raise SpecError(401, "authentication_error", "x-api-key header is required")
    if key != api_key:
        raise SpecError(401, "authentication_error", "invalid x-api-key")
    version = headers.get("anthropic-version")
    if version is None:
        raise refuse("anthropic-version: header is required")
    if version not in VERSIONS:
        raise refuse(f"anthropic-version: {version!r} is not a valid version")
    if not headers.get("content-type", "").startswith("application/json"):
        raise refuse("content-type: application/json is required")
    return version


def _fields(value: Any, allowed: set[str] | frozenset[str], where: str) -> None:
    if not isinstance(value, dict):
        raise refuse(f"{where}: Input should be a valid dictionary")
    for name in value:
        if name not in allowed:
            raise refuse(f"{where}.{name}: Extra inputs are not permitted")


def _string(value: Any, where: str, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise refuse(f"{where}: Input should be a valid string")
    if not empty and not value:
        raise refuse(f"{where}: String should have at least 1 character")
    return value


def _cache_control(value: Any, where: str, ttls: list[str]) -> None:
    if value is None:
        return
    _fields(value, {"type", "ttl"}, where)
    if value.get("type") != "ephemeral":
        raise refuse(f"{where}.type: Input should be 'ephemeral'")
    ttl = value.get("ttl", "5m")
    if ttl not in ("5m", "1h"):
        raise refuse(f"{where}.ttl: Input should be '5m' or '1h'")
    if ttl == "1h" and "5m" in ttls:
        raise refuse(f"{where}: a 1h cache_control must come before 5m ones")
    ttls.append(ttl)


def _image_source(source: Any, where: str) -> None:
    if not isinstance(source, dict):
        raise refuse(f"{where}: Input should be a valid dictionary")
    if source.get("type") == "url":
        _fields(source, {"type", "url"}, where)
        if not _string(source.get("url"), f"{where}.url").startswith(("http://", "https://")):
            raise refuse(f"{where}.url: Input should be a valid URL")
        return
    _fields(source, {"type", "media_type", "data"}, where)
    if source.get("type") != "base64":
        raise refuse(f"{where}.type: Input tag {source.get('type')!r} does not match")
    media = source.get("media_type")
    if media not in IMAGE_MAGIC:
        raise refuse(f"{where}.media_type: Input should be 'image/jpeg', 'image/png', "
                     "'image/gif' or 'image/webp'")
    try:
        raw = base64.b64decode(_string(source.get("data"), f"{where}.data"), validate=True)
    except binascii.Error:
        raise refuse(f"{where}.data: invalid base64 data") from None
    if not raw.startswith(IMAGE_MAGIC[media]):
        raise refuse(f"{where}: Image does not match the provided media type {media}")


def _document(block: dict[str, Any], where: str) -> None:
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") not in ("text", "content", "base64",
                                                                  "url"):
        raise refuse(f"{where}.source: Input tag does not match any of the expected tags")
    if source["type"] == "text":
        _fields(source, {"type", "media_type", "data"}, f"{where}.source")
        _string(source.get("data"), f"{where}.source.data")
    citations = block.get("citations")
    if citations is not None:
        _fields(citations, {"enabled"}, f"{where}.citations")


def check_block(block: Any, role: str, where: str, ttls: list[str]) -> dict[str, Any]:
    kind = block.get("type") if isinstance(block, dict) else None
    allowed = USER_BLOCKS if role == "user" else ASSISTANT_BLOCKS
    if kind not in BLOCK_FIELDS:
        raise refuse(f"{where}.type: Input tag {kind!r} found using 'type' does not match any "
                     "of the expected tags")
    if kind not in allowed:
        raise refuse(f"{where}: {kind} blocks are not allowed in {role} messages")
    assert isinstance(block, dict)
    _fields(block, BLOCK_FIELDS[kind], where)
    _cache_control(block.get("cache_control"), f"{where}.cache_control", ttls)
    if kind == "text" and not _string(block.get("text"), f"{where}.text"):
        raise refuse("messages: text content blocks must be non-empty")
    elif kind == "image":
        _image_source(block.get("source"), f"{where}.source")
    elif kind == "document":
        _document(block, where)
    elif kind == "tool_use":
        if not TOOL_ID.fullmatch(_string(block.get("id"), f"{where}.id")):
            raise refuse(f"{where}.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
        _string(block.get("name"), f"{where}.name")
        if not isinstance(block.get("input"), dict):
            raise refuse(f"{where}.input: Input should be a valid dictionary")
    elif kind == "tool_result":
        _string(block.get("tool_use_id"), f"{where}.tool_use_id")
        content = block.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                check_block(part, "user", f"{where}.content.{j}", ttls)
        elif content is not None:
            _string(content, f"{where}.content")
    return block


def _content(message: dict[str, Any], where: str, ttls: list[str]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            raise refuse("messages: text content blocks must be non-empty")
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise refuse(f"{where}.content: Input should be a valid list")
    return [check_block(b, message["role"], f"{where}.content.{j}", ttls)
            for j, b in enumerate(content)]


def check_messages(messages: Any, ttls: list[str]) -> tuple[list[list[dict[str, Any]]], list[str]]:
    """Every message's blocks, and the lints; tool_use and tool_result paired by id."""
    if not isinstance(messages, list) or not messages:
        raise refuse("messages: List should have at least 1 item")
    turns: list[list[dict[str, Any]]] = []
    lints: list[str] = []
    for i, message in enumerate(messages):
        _fields(message, {"role", "content"}, f"messages.{i}")
        if message.get("role") not in ("user", "assistant"):
            raise refuse(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        blocks = _content(message, f"messages.{i}", ttls)
        if not blocks and i < len(messages) - 1:
            raise refuse(f"messages.{i}: all messages must have non-empty content except for "
                         "the optional final assistant message")
        if i and messages[i - 1]["role"] == message["role"]:
            lints.append(f"messages.{i}: consecutive {message['role']} turns (combined)")
        turns.append(blocks)
    if messages[0]["role"] != "user":
        lints.append("messages.0: the first turn is not the user's")
    _pair_tools(messages, turns)
    return turns, lints


def _pair_tools(messages: list[dict[str, Any]], turns: list[list[dict[str, Any]]]) -> None:
    for i, blocks in enumerate(turns):
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        before = turns[i - 1] if i and messages[i - 1]["role"] == "assistant" else []
        uses = [b["id"] for b in before if b["type"] == "tool_use"]
        for j, tool_use_id in enumerate(results):
            if tool_use_id not in uses:
                raise refuse(f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                             f"`tool_result` blocks: {tool_use_id}. Each `tool_result` block "
                             "must have a corresponding `tool_use` block in the previous message.")
        if messages[i]["role"] == "assistant" and i + 1 < len(turns):
            answered = {b.get("tool_use_id") for b in turns[i + 1] if b["type"] == "tool_result"}
            missing = [u["id"] for u in blocks if u["type"] == "tool_use" and u["id"] not in answered]
            if missing:
                raise refuse(f"messages.{i}: `tool_use` ids were found without `tool_result` "
                             f"blocks immediately after: {', '.join(missing)}. Each `tool_use` "
                             "block must have a corresponding `tool_result` block in the next "
                             "message.")


def check_tools(body: dict[str, Any], ttls: list[str]) -> list[dict[str, Any]]:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise refuse("tools: Input should be a valid list")
    names = []
    for i, tool in enumerate(tools):
        where = f"tools.{i}"
        if isinstance(tool, dict) and tool.get("type", "custom") != "custom":
            _string(tool.get("name"), f"{where}.name")        # a server tool: name and type
        else:
            _fields(tool, {"type", "name", "description", "input_schema", "cache_control",
                           "strict"}, f"{where}.custom")
            if not TOOL_NAME.fullmatch(_string(tool.get("name"), f"{where}.custom.name")):
                raise refuse(f"{where}.custom.name: String should match pattern "
                             "'^[a-zA-Z0-9_-]{1,128}$'")
            schema = tool.get("input_schema")
            if not isinstance(schema, dict) or schema.get("type") != "object":
                raise refuse(f"{where}.custom.input_schema: Field required (a JSON schema of "
                             "type object)")
            _cache_control(tool.get("cache_control"), f"{where}.cache_control", ttls)
        names.append(tool["name"])
    if len(set(names)) != len(names):
        raise refuse("tools: Tool names must be unique.")
    return tools


def check_tool_choice(body: dict[str, Any], tools: list[dict[str, Any]]) -> None:
    choice = body.get("tool_choice")
    if choice is None:
        return
    if not tools:
        raise refuse("tool_choice: tool_choice may only be specified while providing tools")
    kind = choice.get("type") if isinstance(choice, dict) else None
    fields = {"auto": {"type", "disable_parallel_tool_use"}, "any": {"type",
              "disable_parallel_tool_use"}, "tool": {"type", "name", "disable_parallel_tool_use"},
              "none": {"type"}}
    if kind not in fields:
        raise refuse("tool_choice.type: Input tag does not match 'auto', 'any', 'tool', 'none'")
    _fields(choice, fields[kind], f"tool_choice.{kind}")
    if kind == "tool" and choice.get("name") not in {t["name"] for t in tools}:
        raise refuse(f"tool_choice.tool.name: no tool named {choice.get('name')!r}")


def _check_numbers(body: dict[str, Any], version: str, max_output: int) -> None:
    for name in SAMPLING & body.keys():
        if version != VERSIONS[0]:
            raise refuse(f"{name}: Extra inputs are not permitted")
        value = body[name]
        top = None if name == "top_k" else 1
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or (
                top is not None and value > top):
            raise refuse(f"{name}: Input should be between 0 and {top or 'inf'}")
    cap = body.get("max_tokens")
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise refuse("max_tokens: Field required (an integer of at least 1)")
    if cap > max_output:
        raise refuse(f"max_tokens: {cap} > {max_output}, which is the maximum allowed number "
                     f"of output tokens for {body['model']}")


def _check_options(body: dict[str, Any], tools: list[dict[str, Any]]) -> None:
    metadata = body.get("metadata")
    if metadata is not None:
        _fields(metadata, {"user_id"}, "metadata")
    stops = body.get("stop_sequences", [])
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise refuse("stop_sequences: Input should be a valid list of strings")
    if not isinstance(body.get("stream", False), bool):
        raise refuse("stream: Input should be a valid boolean")
    output = body.get("output_config")
    if output is not None:
        _fields(output, {"format", "effort"}, "output_config")
        fmt = output.get("format")
        if fmt is not None:
            _fields(fmt, {"type", "schema"}, "output_config.format")
            if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
                raise refuse("output_config.format: a json_schema format needs a schema object")
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024 or budget >= body["max_tokens"]:
            raise refuse("thinking.enabled.budget_tokens: must be at least 1024 and less than "
                         "max_tokens")
        if body.get("temperature", 1) != 1:
            raise refuse("temperature may only be set to 1 when thinking is enabled")
        if (body.get("tool_choice") or {}).get("type") in ("any", "tool"):
            raise refuse("Thinking may not be enabled when tool_choice forces tool use.")


def check_request(body: Any, version: str, max_outputs: Mapping[str, int]
                  ) -> tuple[list[list[dict[str, Any]]], list[str]]:
    """(every message's blocks, the lints), or a SpecError."""
    _fields(body, TOP_FIELDS, "body")
    model = body.get("model")
    if not isinstance(model, str):
        raise refuse("model: Field required")
    if model not in max_outputs:
        raise SpecError(404, "not_found_error", f"model: {model}")
    _check_numbers(body, version, max_outputs[model])
    ttls: list[str] = []
    tools = check_tools(body, ttls)
    system = body.get("system")
    if isinstance(system, list):
        for j, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise refuse(f"system.{j}.type: Input should be 'text'")
            check_block(block, "user", f"system.{j}", ttls)
    elif system is not None:
        _string(system, "system")
    turns, lints = check_messages(body.get("messages"), ttls)
    _cache_control(body.get("cache_control"), "cache_control", ttls)
    if len(ttls) > MAX_BREAKPOINTS:
        raise refuse(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be "
                     f"provided. Found {len(ttls)}.")
    images = sum(b["type"] == "image" for blocks in turns for b in blocks)
    if images > MAX_IMAGES:
        raise refuse(f"messages: too many images ({images} > {MAX_IMAGES})")
    check_tool_choice(body, tools)
    _check_options(body, tools)
    return turns, lints

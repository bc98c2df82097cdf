"""The test server's model: its own count of what it reads, a prompt cache, its answers.

    segments = prompt_segments(body, turns)          # tools -> system -> messages, counted
    read, written = cache.apply(model, segments, top_level, min_tokens)
    blocks, stop_reason, stop_sequence = answer(body, turns)

The count is the server's own, from the raw request, with a tokenizer the
gateway does not use by default (``cl100k_base``): every text, tool
definition, tool call and result, document, image (Anthropic's published
``width * height / 750`` after scaling the long edge to 1568 px, at most
1,600; a URL image, which this server does not fetch, at that maximum) and
schema, plus framing per message and the tool-use system prompt Anthropic
documents (346 tokens with auto/none, 313 with any/tool).

The cache honours ``cache_control`` breakpoints as the reference describes
(/work/notes/providers.md, 1.7): the prefix order tools -> system ->
messages; a breakpoint whose prefix is shorter than the model's minimum is
not cached (no error); a read finds the longest cached prefix at or up to
20 blocks before a breakpoint; ``input_tokens`` are the tokens after the
last breakpoint written or read; entries live 5 minutes or 1 hour.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import tiktoken

ENCODING = tiktoken.get_encoding("cl100k_base")
MESSAGE_FRAMING, SYSTEM_FRAMING, TOOL_USE_FRAMING = 4, 3, 8
TOOLS_SYSTEM = {"auto": 346, "none": 346, "any": 313, "tool": 313}
IMAGE_MAX_TOKENS, IMAGE_LONG_EDGE, LOOKBACK = 1600, 1568, 20
TTL_S = {"5m": 300.0, "1h": 3600.0}


def count(text: str) -> int:
    return len(ENCODING.encode(text, disallowed_special=()))


def canonical(value: Any) -> bytes:
    """A block as the cache keys it: its content, without its cache_control mark."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "cache_control"}
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def image_size(raw: bytes) -> tuple[int, int] | None:
    if raw.startswith(b"\x89PNG") and len(raw) >= 24:
        w, h = struct.unpack(">II", raw[16:24])
        return int(w), int(h)
    if raw.startswith(b"GIF") and len(raw) >= 10:
        w, h = struct.unpack("<HH", raw[6:10])
        return int(w), int(h)
    return None


def image_tokens(source: dict[str, Any]) -> int:
    size = image_size(base64.b64decode(source["data"])) if source.get("type") == "base64" else None
    if size is None:
        return IMAGE_MAX_TOKENS
    w, h = size
    scale = min(1.0, IMAGE_LONG_EDGE / max(w, h, 1))
    return max(1, min(IMAGE_MAX_TOKENS, round(w * scale * h * scale / 750)))


def block_tokens(block: dict[str, Any]) -> int:
    kind = block["type"]
    if kind == "text":
        return count(block["text"])
    if kind == "image":
        return image_tokens(block["source"])
    if kind == "document":
        source = block["source"]
        text = source.get("data") if source["type"] == "text" else json.dumps(source)
        return count(" ".join(str(t) for t in (block.get("title"), block.get("context"), text) if t))
    if kind == "tool_use":
        return TOOL_USE_FRAMING + count(block["name"]) + count(json.dumps(block["input"]))
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return TOOL_USE_FRAMING + sum(block_tokens(b) for b in content)
        return TOOL_USE_FRAMING + count(content or "")
    if kind == "thinking":
        return count(block["thinking"])
    return count(json.dumps(block))


@dataclass(slots=True)
class Segment:
    key: bytes
    tokens: int
    cache: dict[str, Any] | None


def prompt_segments(body: dict[str, Any], turns: list[list[dict[str, Any]]]) -> list[Segment]:
    """The prompt in the cache's order, each block counted (framing on a turn's first)."""
    out: list[Segment] = []
    tools = body.get("tools") or []
    choice = (body.get("tool_choice") or {}).get("type", "auto")
    for i, tool in enumerate(tools):
        extra = TOOLS_SYSTEM[choice] if i == 0 else 0
        out.append(Segment(canonical(tool), extra + count(json.dumps(tool)), tool.get("cache_control")))
    system = body.get("system")
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system or []
    for i, block in enumerate(blocks):
        out.append(Segment(canonical(block), block_tokens(block) + (SYSTEM_FRAMING if i == 0 else 0),
                           block.get("cache_control")))
    for turn in turns:
        for i, block in enumerate(turn):
            out.append(Segment(canonical(block),
                               block_tokens(block) + (MESSAGE_FRAMING if i == 0 else 0),
                               block.get("cache_control")))
    schema = ((body.get("output_config") or {}).get("format") or {}).get("schema")
    if schema is not None:
        out.append(Segment(canonical(schema), count(json.dumps(schema)), None))
    return out


@dataclass
class Cached:
    read: int = 0
    written: int = 0
    written_1h: int = 0


@dataclass
class PromptCache:
    entries: dict[tuple[str, str], float] = field(default_factory=dict)   # -> expiry

    def apply(self, model: str, segments: list[Segment], top_level: dict[str, Any] | None,
              min_tokens: int, now: float | None = None) -> Cached:
        now = time.monotonic() if now is None else now
        prefix, hashes, total, digest = [], [], 0, hashlib.sha256(model.encode())
        for seg in segments:
            total += seg.tokens
            digest.update(seg.key)
            prefix.append(total)
            hashes.append(digest.hexdigest())
        marks = [(i, s.cache.get("ttl", "5m")) for i, s in enumerate(segments) if s.cache]
        if top_level is not None and segments:
            marks.append((len(segments) - 1, top_level.get("ttl", "5m")))
        out = Cached()
        for i, _ in marks:
            for j in range(i, max(-1, i - LOOKBACK), -1):
                key = (model, hashes[j])
                if self.entries.get(key, 0.0) > now:
                    out.read = max(out.read, prefix[j])
                    self.entries[key] = max(self.entries[key], now + TTL_S["5m"])   # refreshed
                    break
        previous = out.read
        for i, ttl in sorted(marks):
            if prefix[i] >= min_tokens and prefix[i] > previous:
                self.entries[(model, hashes[i])] = now + TTL_S[ttl]
                out.written += prefix[i] - previous
                out.written_1h += prefix[i] - previous if ttl == "1h" else 0
                previous = prefix[i]
        return out


def sample(schema: Any) -> Any:
    """A value that fits a (simple) JSON schema."""
    if not isinstance(schema, dict):
        return None
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {k: sample(v) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [sample(schema.get("items"))]
    return {"string": "Paris", "number": 21.5, "integer": 3, "boolean": True}.get(str(kind))


def _last_user_text(turns: list[list[dict[str, Any]]]) -> tuple[str, bool]:
    last = turns[-1] if turns else []
    texts = [b["text"] for b in last if b["type"] == "text"]
    results = [b for b in last if b["type"] == "tool_result"]
    return " ".join(texts), bool(results)


def _text_answer(body: dict[str, Any], turns: list[list[dict[str, Any]]]) -> str:
    schema = ((body.get("output_config") or {}).get("format") or {}).get("schema")
    if schema is not None:
        return json.dumps(sample(schema))
    said, after_tool = _last_user_text(turns)
    lead = "Thanks, the tool answered." if after_tool else "You said:"
    return f"{lead} {' '.join(said.split()[:12])} This answer comes from the test server."


def answer(body: dict[str, Any], turns: list[list[dict[str, Any]]]
           ) -> tuple[list[dict[str, Any]], str, str | None]:
    """(content blocks, stop_reason, stop_sequence) for a checked request."""
    blocks: list[dict[str, Any]] = []
    if (body.get("thinking") or {}).get("type") == "enabled":
        blocks.append({"type": "thinking", "thinking": "I considered the question.",
                       "signature": hashlib.sha256(canonical(turns)).hexdigest()[:24]})
    tools = body.get("tools") or []
    choice = body.get("tool_choice") or {"type": "auto"}
    _, after_tool = _last_user_text(turns)
    if tools and (choice["type"] in ("any", "tool") or (choice["type"] == "auto" and not after_tool)):
        tool = next((t for t in tools if t["name"] == choice.get("name")), tools[0])
        blocks.append({"type": "tool_use", "id": "toolu_" + hashlib.sha256(canonical(turns)
                                                                          ).hexdigest()[:20],
                       "name": tool["name"], "input": sample(tool.get("input_schema")) or {}})
        return blocks, "tool_use", None
    text, reason, sequence = _text_answer(body, turns), "end_turn", None
    for stop in body.get("stop_sequences") or []:
        if stop and stop in text:
            text, reason, sequence = text[: text.index(stop)], "stop_sequence", stop
            break
    tokens = ENCODING.encode(text, disallowed_special=())
    if len(tokens) > body["max_tokens"]:
        text, reason, sequence = ENCODING.decode(tokens[: body["max_tokens"]]), "max_tokens", None
    block: dict[str, Any] = {"type": "text", "text": text}
    cited = _cited_document(turns)
    if cited is not None:
        block["citations"] = [cited]
    blocks.append(block)
    return blocks, reason, sequence


def _cited_document(turns: list[list[dict[str, Any]]]) -> dict[str, Any] | None:
    docs = [b for turn in turns for b in turn if b["type"] == "document"]
    for index, doc in enumerate(docs):
        if (doc.get("citations") or {}).get("enabled") and doc["source"]["type"] == "text":
            cited = doc["source"]["data"][:40]
            return {"type": "char_location", "cited_text": cited, "document_index": index,
                    "document_title": doc.get("title"), "start_char_index": 0,
                    "end_char_index": len(cited)}
    return None


def output_tokens(blocks: list[dict[str, Any]]) -> int:
    return sum(block_tokens(b) for b in blocks)

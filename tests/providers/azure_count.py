"""The Azure test server's own count of a chat body's prompt tokens, from the raw body.

    count = PromptCount.of(body)          # .tokens, .ids (the prompt as token ids, for caching)

o200k_base, OpenAI's chat accounting as its cookbook states it: 3 tokens a
message and 1 for a name, 3 to prime the reply; tools by the cookbook's
``num_tokens_for_tools`` (gpt-4o constants); an image 85 tokens at ``low``,
else 85 + 170 a 512-px tile after the scaling of OpenAI's vision guide
(dimensions read from the PNG or JPEG header); a response_format schema as
its JSON text. Independent of the gateway's own counter: it never imports it.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from dataclasses import dataclass
from typing import Any

import tiktoken

ENCODING = tiktoken.get_encoding("o200k_base")
FUNC_INIT, PROP_INIT, PROP_KEY, ENUM_INIT, ENUM_ITEM, FUNC_END = 7, 3, 3, -3, 3, 12


def image_size(url: str) -> tuple[int, int] | None:
    """(width, height) of a PNG or JPEG ``data:`` URL; None for anything else."""
    if not url.startswith("data:") or "," not in url:
        return None
    try:
        raw = base64.b64decode(url.split(",", 1)[1][:65536], validate=False)
    except ValueError:
        return None
    if raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) >= 24:
        return struct.unpack(">II", raw[16:24])
    i = 2
    while raw[:2] == b"\xff\xd8" and i + 9 < len(raw):
        marker, length = raw[i + 1], struct.unpack(">H", raw[i + 2:i + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            height, width = struct.unpack(">HH", raw[i + 5:i + 9])
            return width, height
        i += 2 + length
    return None


def image_tokens(url: str, detail: str) -> int:
    size = image_size(url)
    if detail == "low" or size is None:
        return 85
    w, h = float(size[0]), float(size[1])
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
    if min(w, h) > 768:
        w, h = w * 768 / min(w, h), h * 768 / min(w, h)
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def tools_tokens(tools: list[dict[str, Any]]) -> int:
    total = 0
    for tool in tools:
        fn = tool["function"]
        total += FUNC_INIT + len(ENCODING.encode(
            f"{fn['name']}:{(fn.get('description') or '').rstrip('.')}"))
        props = (fn.get("parameters") or {}).get("properties") or {}
        if props:
            total += PROP_INIT
        for key, prop in props.items():
            total += PROP_KEY
            for item in prop.get("enum") or []:
                total += ENUM_INIT + ENUM_ITEM + len(ENCODING.encode(str(item)))
            total += len(ENCODING.encode(
                f"{key}:{prop.get('type', '')}:{(prop.get('description') or '').rstrip('.')}"))
        total += FUNC_END
    return total


@dataclass
class PromptCount:
    tokens: int
    ids: list[int]             # the messages' text as token ids: what a prefix cache matches

    @classmethod
    def of(cls, body: dict[str, Any]) -> PromptCount:
        ids: list[int] = []
        extra = 3                                    # every reply is primed with 3 tokens
        for message in body["messages"]:
            extra += 3 + (1 if message.get("name") else 0)
            ids += ENCODING.encode(message["role"])
            content = message.get("content")
            for part in [content] if isinstance(content, str) else content or []:
                if isinstance(part, str):
                    ids += ENCODING.encode(part)
                elif part["type"] == "image_url":
                    extra += image_tokens(part["image_url"]["url"],
                                          part["image_url"].get("detail", "auto"))
                else:
                    ids += ENCODING.encode(part.get("text") or part.get("refusal") or "")
            for call in message.get("tool_calls") or []:
                ids += ENCODING.encode(call["function"]["name"] + call["function"]["arguments"])
        if body.get("tools"):
            extra += tools_tokens(body["tools"])
        schema = (body.get("response_format") or {}).get("json_schema")
        if schema:
            extra += len(ENCODING.encode(json.dumps(schema.get("schema") or {})))
        return cls(len(ids) + extra, ids)

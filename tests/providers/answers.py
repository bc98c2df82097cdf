"""What the provider test servers answer: deterministic text, and tool arguments or
structured output that satisfy the JSON schema they were given.

    text, cut = reply("What is 2+2?", max_tokens=50, encoding=enc)
    arguments = instance({"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]})          # {"city": "Paris"}
    pieces = split_words("Hello there, world")             # ["Hello", " there,", " world"]

The answers depend only on the request, so a test can predict them; the
token counts are the server's own (its tokenizer), never the gateway's.
"""

from __future__ import annotations

import re
from typing import Any

import tiktoken

SAMPLE_STRING = "Paris"
MAX_DEPTH = 8


def reply(prompt: str, max_tokens: int, encoding: tiktoken.Encoding) -> tuple[str, bool]:
    """A short answer echoing the prompt's first words; True when ``max_tokens`` cut it."""
    words = prompt.split()[:12]
    text = "Hello! You said: " + " ".join(words) if words else "Hello!"
    tokens = encoding.encode(text)
    if len(tokens) <= max_tokens:
        return text, False
    return encoding.decode(tokens[:max_tokens]), True


def instance(schema: Any, depth: int = 0) -> Any:
    """A value that satisfies ``schema`` (the JSON Schema subset tests use: types,
    enum, const, properties, required, items, anyOf/oneOf, minimum)."""
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return instance(schema[key][0], depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: instance(sub, depth + 1) for name, sub in props.items()}
    if kind == "array":
        return [instance(schema.get("items") or {"type": "string"}, depth + 1)]
    if kind == "integer":
        return int(schema.get("minimum", 7))
    if kind == "number":
        return float(schema.get("minimum", 1.5))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return SAMPLE_STRING


def split_words(text: str) -> list[str]:
    """``text`` in stream-sized pieces: each word with the space before it."""
    return re.findall(r"\s*\S+", text) or [text]


def pieces_of(text: str, size: int = 7) -> list[str]:
    """``text`` cut every ``size`` characters, as streamed tool arguments come."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]

"""The simulator's own count of a prompt, as an honest server counts what it receives.

    prompt_tokens(payload, "chat/completions")   # -> int, from the raw request body alone

A real server bills every token its model reads: it renders the request
into one prompt with its chat template, then tokenizes it. This does the
same, from the request body the simulator received and nothing else, with
its own tokenizer (tiktoken's ``o200k_base``, loaded here) and the rules a
server publishes:

- **messages** in a ChatML template (``<|im_start|>role`` ... ``<|im_end|>``),
  an assistant's tool calls as ``to=functions.NAME`` turns, tool results as
  ``tool`` turns;
- **tools** in the system turn as OpenAI renders them, a TypeScript
  namespace of one ``type NAME = (_: {...}) => any;`` per function, nested
  objects indented;
- a **json_schema** response format as its schema's JSON under
  ``# Response Formats``;
- **images** by OpenAI's tile rule, from the size the image really has (read
  with Pillow); an image behind a URL, which the simulator cannot fetch,
  counts as one 512 x 512 tile (255 tokens);
- legacy completions and embeddings: each prompt's text, and token ids as
  they are.

It is deliberately not the gateway's counter (``classifiers/``): the money
tests compare what the gateway bills with this count, so it must come from
an independent reading of the request.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import re
from functools import lru_cache
from typing import Any

REMOTE_IMAGE_TOKENS = 85 + 170     # one 512-px tile: what a fetched 512 x 512 image costs


@lru_cache(maxsize=1)
def encoding() -> Any:
    """The tokenizer, loaded once (about half a second: servers load it at start-up);
    None where its files cannot be had (no ``TIKTOKEN_CACHE_DIR``, no network)."""
    try:
        import tiktoken

        return tiktoken.get_encoding("o200k_base")
    except Exception:   # missing files, no network: the counts become estimates
        return None


START, END = "<|im_start|>", "<|im_end|>"     # one token each, as a server's specials
SPECIAL_IDS = {START: 1 << 30, END: (1 << 30) + 1}
_SPECIALS = re.compile("(" + "|".join(re.escape(s) for s in SPECIAL_IDS) + ")")


def token_ids(text: str) -> list[int]:
    """The text's tokens, the template's markers one special token each."""
    ids: list[int] = []
    enc = encoding()
    for piece in _SPECIALS.split(text):
        if not piece:
            continue
        special = SPECIAL_IDS.get(piece)
        if special is not None:
            ids.append(special)
        elif enc is not None:
            ids.extend(enc.encode(piece, disallowed_special=()))
        else:                   # a byte estimate, as the gateway's own fallback
            raw = piece.encode()
            ids.extend(int.from_bytes(raw[i:i + 4], "little") for i in range(0, len(raw), 4))
    return ids


def _tokens(text: str) -> int:
    return len(token_ids(text)) if text else 0


def _ts_type(schema: Any, indent: str) -> str:
    if not isinstance(schema, dict):
        return "any"
    if isinstance(schema.get("enum"), list):
        return " | ".join(json.dumps(v) for v in schema["enum"])
    union = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(union, list):
        return " | ".join(_ts_type(s, indent) for s in union)
    kind = schema.get("type")
    if kind == "array":
        return _ts_type(schema.get("items"), indent) + "[]"
    if kind == "object" or isinstance(schema.get("properties"), dict):
        inner = indent + "  "
        lines = ["{"]
        required = schema["required"] if isinstance(schema.get("required"), list) else []
        for name, prop in (schema.get("properties") or {}).items():
            if isinstance(prop, dict) and prop.get("description"):
                lines.append(f"{inner}// {prop['description']}")
            mark = "" if name in required else "?"
            lines.append(f"{inner}{name}{mark}: {_ts_type(prop, inner)},")
        lines.append(indent + "}")
        return "\n".join(lines)
    return {"integer": "number"}.get(kind, kind) if isinstance(kind, str) else "any"


def _tools_block(tools: list[Any]) -> str:
    lines = ["# Tools", "", "## functions", "", "namespace functions {", ""]
    for tool in tools:
        fn = (tool or {}).get("function") or (tool or {}).get("custom") or tool
        if not isinstance(fn, dict):
            continue
        if fn.get("description"):
            lines.append(f"// {fn['description']}")
        params = fn.get("parameters")
        sig = f"(_: {_ts_type(params, '')}) => any" if params else "() => any"
        lines.append(f"type {fn.get('name', '')} = {sig};")
        lines.append("")
    lines.append("} // namespace functions")
    return "\n".join(lines)


def _format_block(fmt: Any) -> str:
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return ""
    spec = fmt.get("json_schema") or {}
    return (f"# Response Formats\n\n## {spec.get('name', '')}\n\n"
            f"{json.dumps(spec.get('schema') or {})}")


def _image_tokens(image: Any) -> int:
    url = image.get("url") if isinstance(image, dict) else None
    detail = image.get("detail", "auto") if isinstance(image, dict) else "auto"
    if detail == "low":
        return 85
    match = re.match(r"data:[^,]*;base64,", url) if isinstance(url, str) else None
    if match is None or not isinstance(url, str):
        return REMOTE_IMAGE_TOKENS
    from PIL import Image

    try:
        with Image.open(io.BytesIO(base64.b64decode(url[match.end():]))) as img:
            w, h = float(img.size[0]), float(img.size[1])
    except Exception:
        return REMOTE_IMAGE_TOKENS
    scale = min(1.0, 2048 / max(w, h))
    w, h = w * scale, h * scale
    scale = min(1.0, 768 / min(w, h))
    return 85 + 170 * math.ceil(w * scale / 512) * math.ceil(h * scale / 512)


Mark = tuple[int, bytes, int]  # an image: where it sits in the text (chars), what it is, tokens


def _content(content: Any) -> tuple[str, int, list[Mark]]:
    """(text, image tokens, images) of a message's content."""
    if isinstance(content, str):
        return content, 0, []
    texts: list[str] = []
    images, marks = 0, []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict) and part.get("type") == "image_url":
            tokens = _image_tokens(part.get("image_url"))
            images += tokens
            marks.append((len("\n".join(texts)), _digest(part.get("image_url")), tokens))
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts), images, marks


def _digest(image: Any) -> bytes:
    url = image.get("url") if isinstance(image, dict) else None
    return hashlib.blake2b(str(url).encode(), digest_size=8).digest()


def _chat_prompt(payload: dict[str, Any]) -> tuple[str, int, list[Mark]]:
    """The prompt as one ChatML string, the image tokens beside it, and where each image
    sits in it."""
    turns: list[str] = []
    images, marks, at = 0, [], 0
    system_extra = [b for b in (_tools_block(payload["tools"]) if payload.get("tools") else "",
                                _format_block(payload.get("response_format"))) if b]
    messages = list(payload.get("messages") or [])
    if system_extra and not (messages and messages[0].get("role") in ("system", "developer")):
        messages.insert(0, {"role": "system", "content": ""})
    for i, message in enumerate(messages):
        text, pictures, where = _content(message.get("content"))
        images += pictures
        if i == 0 and system_extra:
            text = "\n\n".join([text, *system_extra]) if text else "\n\n".join(system_extra)
        role = message.get("role", "user")
        if message.get("name"):
            role = f"{role} name={message['name']}"
        head = f"{START}{role}\n"
        marks += [(at + len(head) + offset, digest, n) for offset, digest, n in where]
        turns.append(f"{head}{text}{END}\n")
        at += len(turns[-1])
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            turns.append(f"{START}assistant to=functions.{fn.get('name', '')}\n"
                         f"{fn.get('arguments', '')}{END}\n")
            at += len(turns[-1])
    turns.append(f"{START}assistant\n")
    return "".join(turns), images, marks


# An image's tokens in the ids a prefix cache keys on: past any tokenizer's ids.
IMAGE_KEY_BASE = 1 << 40


def prompt_of(payload: dict[str, Any], route: str = "chat/completions"
              ) -> tuple[int, list[list[int]]]:
    """(the prompt tokens an honest server bills for this body, per prompt the ids a
    prefix cache keys on). A chat body is one prompt, whose ids are its text's with each
    image's tokens where it sits, keyed by the image (as vLLM keys a block on the images
    in it, and caches their tokens); a list of legacy prompts is a prompt each, as a
    server runs each as a request of its own."""
    if route == "chat/completions":
        text, images, marks = _chat_prompt(payload)
        if not marks:
            ids = token_ids(text)
            return len(ids) + images, [ids]
        # Text between images tokenized apart (the keys' boundaries move a little; the
        # bill is the whole text's count), in one pass.
        ids, total, done = [], images, 0
        for cut, digest, n in marks:
            ids += token_ids(text[done:cut])
            ids += [IMAGE_KEY_BASE + int.from_bytes(digest[:5], "big")] * n
            done = cut
        ids += token_ids(text[done:])
        return total + len(token_ids(text)), [ids]
    value = payload.get("prompt" if route == "completions" else "input")
    items = value if isinstance(value, list) and value and not isinstance(value[0], int) else [value]
    total, keys = 0, []
    for item in items:
        item_ids = token_ids(item) if isinstance(item, str) else list(item or ())
        total += len(item_ids)
        keys.append(item_ids)
    return total, keys


def prompt_tokens(payload: dict[str, Any], route: str = "chat/completions") -> int:
    """The prompt tokens an honest server bills for this request body."""
    return prompt_of(payload, route)[0]

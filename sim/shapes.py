"""The simulator's answers on the wire: chat, legacy text completions and embeddings.

    chunk(TEXT, cid, created, "small", {"delta": {"content": "hi"}}, with_usage=False)
    embeddings(payload, prompt_tokens=12, dimensions=256)    # a create-embedding response

Pure functions, in OpenAI's shapes (``chat.completion[.chunk]``,
``text_completion``, ``list`` of ``embedding``), so the gateway relays the
simulator like any other upstream. Embedding vectors are deterministic: the
same input always gives the same unit vector.
"""

from __future__ import annotations

import base64
import hashlib
import math
import random
import struct
from typing import Any

CHAT, TEXT = "chat", "text"
_OBJECT = {CHAT: "chat.completion.chunk", TEXT: "text_completion"}


def _choice(kind: str, choice: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"index": choice.get("index", 0), "logprobs": choice.get("logprobs"),
                           "finish_reason": choice.get("finish_reason")}
    if kind == CHAT:
        out["delta"] = choice["delta"]
    else:
        out["text"] = choice["delta"].get("content") or ""
        out["logprobs"] = None
    return out


def chunk(kind: str, cid: str, created: int, model: str, choice: dict[str, Any] | None,
          with_usage: bool) -> dict[str, Any]:
    """One streamed chunk; ``choice`` None is the usage chunk's empty choices."""
    data: dict[str, Any] = {
        "id": cid, "object": _OBJECT[kind], "created": created, "model": model,
        "system_fingerprint": "routegate-sim",
        "choices": [] if choice is None else [_choice(kind, choice)],
    }
    if with_usage:
        data["usage"] = None
    return data


def usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    """OpenAI's usage object; ``cached``: prompt tokens read from the prefix cache, reported
    as ``prompt_tokens_details.cached_tokens`` (as vLLM and llama.cpp report them)."""
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def text_answer(model: str, created: int, answers: dict[int, list[dict[str, Any]]],
                prompt_tokens: int, completion_tokens: int, cached: int = 0) -> dict[str, Any]:
    """A non-streamed legacy completion from each answer's deltas."""
    choices = []
    for index, deltas in sorted(answers.items()):
        text = "".join(d["delta"].get("content") or "" for d in deltas)
        finish = next((d["finish_reason"] for d in reversed(deltas) if d.get("finish_reason")),
                      "stop")
        choices.append({"index": index, "text": text, "logprobs": None, "finish_reason": finish})
    return {"id": f"cmpl-{random.getrandbits(96):024x}", "object": "text_completion",
            "created": created, "model": model, "system_fingerprint": "routegate-sim",
            "choices": choices, "usage": usage(prompt_tokens, completion_tokens, cached)}


def _inputs(value: Any) -> list[Any]:
    if isinstance(value, str) or (isinstance(value, list) and value and
                                  all(isinstance(t, int) for t in value)):
        return [value]
    return list(value) if isinstance(value, list) else [value]


def vector(item: Any, dimensions: int) -> list[float]:
    """A deterministic unit vector for one input (text or token ids)."""
    seed = hashlib.blake2b(repr(item).encode(), digest_size=8).digest()
    rng = random.Random(int.from_bytes(seed, "big"))
    raw = [rng.uniform(-1.0, 1.0) for _ in range(dimensions)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def embeddings(payload: dict[str, Any], *, prompt_tokens: int, dimensions: int
               ) -> dict[str, Any]:
    asked = payload.get("dimensions")
    dims: int = asked if isinstance(asked, int) and 0 < asked <= 8192 else dimensions
    as_base64 = payload.get("encoding_format") == "base64"
    data = []
    for i, item in enumerate(_inputs(payload.get("input"))):
        values = vector(item, dims)
        encoded: Any = (base64.b64encode(struct.pack(f"<{dims}f", *values)).decode()
                        if as_base64 else values)
        data.append({"object": "embedding", "index": i, "embedding": encoded})
    return {"object": "list", "data": data, "model": payload.get("model"),
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}

"""What the simulator says: plain text, tool calls or JSON, cut into token pieces.

Pure functions of the request and a seeded RNG, so tests are repeatable.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

WORDS = (
    "the model answers with a short and plausible reply about routing cost latency quality "
    "tokens budget request gateway batch stream team energy prefill decode queue").split()
CHARS_PER_JSON_TOKEN = 4


@dataclass(slots=True)
class Draft:
    pieces: list[dict[str, Any]]          # one delta per output token
    finish_reason: str
    logprobs: list[dict[str, Any]] | None = None


def example_value(schema: Any, depth: int = 0) -> Any:
    """A value that satisfies a (simple) JSON schema: types, required, enums."""
    if not isinstance(schema, dict) or depth > 6:
        return "value"
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: example_value(v, depth + 1) for k, v in props.items()}
    if kind == "array":
        return [example_value(schema.get("items"), depth + 1)]
    return {"integer": 1, "number": 1.5, "boolean": True, "null": None}.get(str(kind), "value")


def _tool_call(payload: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
    """The call a model makes, if any: its tool's example arguments, run on to
    ``min_tokens``."""
    tools = payload.get("tools") or []
    choice = payload.get("tool_choice", "auto")
    messages = payload.get("messages") or [{}]
    last = messages[-1] if isinstance(messages[-1], dict) else {}
    if not tools or choice == "none" or (choice == "auto" and last.get("role") == "tool"):
        return None   # like a model: once a tool's result is in, "auto" answers in text
    tool = tools[0]
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        tool = next((t for t in tools if (t.get("function") or {}).get("name") == wanted), tool)
    function = tool.get("function") or {}
    schema = function.get("parameters") or {"type": "object"}
    arguments = _run_on(orjson.dumps(example_value(schema)).decode(), min_tokens(payload) - 1,
                        schema)
    return {"name": function.get("name", "tool"), "arguments": arguments,
            "id": f"call_{rng.getrandbits(48):012x}"}


def min_tokens(payload: dict[str, Any]) -> int:
    """vLLM's ``min_tokens``: at least this many tokens before the answer may end (0: not
    asked; bounded as a server bounds it, by ``max_tokens``)."""
    value = payload.get("min_tokens")
    return min(value, MAX_MIN_TOKENS) if type(value) is int and value > 0 else 0


MAX_MIN_TOKENS = 1 << 15    # a context's worth: an answer's pieces are drafted up front


# A string property with one of these keeps its value: running it on would break it.
_FIXED = ("enum", "const", "pattern", "format", "maxLength")


def _run_on(arguments: str, tokens: int, schema: Any) -> str:
    """Arguments of at least ``tokens`` pieces (vLLM's ``min_tokens``: a model asked for
    so many keeps writing): the first free string value runs on (one whose property
    fixes no form), so they still fit ``schema``; without one they stay as they are."""
    if len(arguments) >= tokens * CHARS_PER_JSON_TOKEN:
        return arguments
    try:
        args = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    props = schema.get("properties") if isinstance(schema, dict) else None
    props = props if isinstance(props, dict) else {}

    def free(key: str) -> bool:
        prop = props.get(key)
        return isinstance(prop, dict) and not any(k in prop for k in _FIXED)
    key = next((k for k, v in args.items() if isinstance(v, str) and free(k)), None) \
        if isinstance(args, dict) else None
    if key is None:
        return arguments
    missing = tokens * CHARS_PER_JSON_TOKEN - len(arguments)
    words = " ".join(WORDS[i % len(WORDS)] for i in range(missing // 4 + 1))
    args[key] = f"{args[key]} {words}"[: len(args[key]) + missing + 1]
    return orjson.dumps(args).decode()


def _json_text(payload: dict[str, Any], correct: bool) -> str | None:
    fmt = payload.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") not in ("json_object", "json_schema"):
        return None
    if fmt["type"] == "json_schema":
        value = example_value((fmt.get("json_schema") or {}).get("schema") or {})
    else:
        value = {"answer": "simulated", "correct": correct}
    return orjson.dumps(value).decode()


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _logprobs(pieces: list[dict[str, Any]], payload: dict[str, Any], rng: random.Random,
              mean: float = -0.5) -> list[dict[str, Any]] | None:
    if not payload.get("logprobs"):
        return None
    top_n = int(payload.get("top_logprobs") or 0)
    out = []
    for piece in pieces:
        token = piece.get("content") or ""
        lp = 2 * mean * rng.random()       # uniform on [2*mean, 0]: its mean is `mean`
        top = [{"token": token, "logprob": lp, "bytes": list(token.encode())}]
        top += [{"token": w, "logprob": lp - 1 - i, "bytes": list(w.encode())}
                for i, w in enumerate(WORDS[: max(0, top_n - 1)])]
        out.append({"content": [{"token": token, "logprob": lp, "bytes": list(token.encode()),
                                 "top_logprobs": top[:top_n]}], "refusal": None})
    return out


def draft_answer(payload: dict[str, Any], n_tokens: int, *, correct: bool, invalid_json: bool,
                 rng: random.Random, invalid_args: bool = False, logprob_mean: float = -0.5
                 ) -> Draft:
    limit = payload.get("max_completion_tokens") or payload.get("max_tokens")
    call = _tool_call(payload, rng)
    if call is not None:
        if invalid_args:
            # Arguments that do not parse: a weak model's most common tool-call fault.
            call["arguments"] = call["arguments"][: max(1, len(call["arguments"]) // 2)]
        head = {"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                "function": {"name": call["name"], "arguments": ""}}]}
        tail = [{"tool_calls": [{"index": 0, "function": {"arguments": part}}]}
                for part in _chunks(call["arguments"], CHARS_PER_JSON_TOKEN)]
        if limit and 1 + len(tail) > int(limit):      # a server stops at max_tokens
            return Draft([head, *tail[: int(limit) - 1]], "length")
        return Draft([head, *tail], "tool_calls")
    text = _json_text(payload, correct)
    if text is not None:
        parts = _chunks(text, CHARS_PER_JSON_TOKEN)
        finish = "stop"
        if invalid_json:
            parts, finish = parts[: max(1, len(parts) // 2)], "length"
        if limit and len(parts) > int(limit):
            parts, finish = parts[: int(limit)], "length"
        pieces = [{"content": p} for p in parts]
    else:
        words = [WORDS[rng.randrange(len(WORDS))] for _ in range(n_tokens)]
        pieces = [{"content": (" " if i else "") + w} for i, w in enumerate(words)]
        finish = "length" if limit and n_tokens >= int(limit) else "stop"
    return Draft(pieces, finish, _logprobs(pieces, payload, rng, logprob_mean))

"""Our own count of an answer's output, for an upstream that reported no usage.

    tokens = count_answer_tokens(completion_json, "o200k_base")
    tokens = count_relayed_tokens(["Hel", "lo"], "o200k_base")      # what a stream relayed

Every choice counts (``n`` answers are ``n`` times the output), with its
content, refusal and tool calls; legacy completions' ``text`` too.
"""

from __future__ import annotations

from typing import Any

from classifiers.length import counter_for, message_text


def count_answer_tokens(data: Any, encoding: str) -> int:
    """Tokens in a non-streamed answer's choices (content, tool calls, refusal)."""
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        return 0
    texts = []
    for choice in data["choices"]:
        if isinstance(choice, dict) and isinstance(choice.get("text"), str):
            texts.append(choice["text"])
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        texts.append(message_text(message.get("content")))
        texts.append(message_text(message.get("refusal")))
        for call in message.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                texts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    text = "".join(t for t in texts if t)
    return counter_for(encoding).count_text(text) if text else 0


def count_relayed_tokens(pieces: list[str], encoding: str) -> int:
    """Tokens in what a stream relayed (its text and tool-call arguments), counted with
    the model's tokenizer: a stream the client left is billed for these, not its chunks."""
    return counter_for(encoding).count_text("".join(pieces))

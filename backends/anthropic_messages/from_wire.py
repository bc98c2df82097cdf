"""An Anthropic Messages answer as OpenAI chat: pure, no network.

    chat = to_chat_completion(message, model="claude-haiku", created=1_700_000_000)
    usage = usage_of(message["usage"])          # -> core.usage.Usage, or None if unreadable
    finish_reason("tool_use")                   # -> "tool_calls"

    content blocks    text -> ``content`` (joined), tool_use -> ``tool_calls`` (input as
                      JSON ``arguments``), thinking -> ``reasoning_content``; others
                      (redacted thinking, server tools' blocks) have no chat form
    stop_reason       end_turn, stop_sequence, pause_turn -> stop; max_tokens,
                      model_context_window_exceeded -> length; tool_use -> tool_calls;
                      refusal -> content_filter; anything else -> stop
    usage             Anthropic's ``input_tokens`` exclude the cache's: prompt_tokens =
                      input + cache_read + cache_creation; cached_tokens = cache_read,
                      cache_write_tokens = cache_creation (billed at the model's cache
                      prices; of them cache_write_1h_tokens, ``cache_creation``'s
                      ephemeral_1h_input_tokens, at the hour's), completion_tokens =
                      output_tokens

Every count is the upstream's word: an input or output count that is not a
non-negative integer makes the usage unreadable (None: billing counts for
itself; the chat answer's ``usage`` then says "unreadable", so billing flags
it), a cache count that is not one is 0 and flagged (``Usage.cache_anomaly``),
and each is saturated at ``core.usage.MAX_REPORTED_TOKENS``.
"""

from __future__ import annotations

from typing import Any

import orjson

from core.usage import MAX_REPORTED_TOKENS, UNREADABLE, UNREADABLE_USAGE, Usage, cache_count

FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop",
                  "max_tokens": "length", "model_context_window_exceeded": "length",
                  "tool_use": "tool_calls", "refusal": "content_filter"}


def finish_reason(stop_reason: Any) -> str:
    return FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def _count(value: Any) -> int | None:
    """A token count the upstream reported, saturated; None if it is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return min(value, MAX_REPORTED_TOKENS)


def usage_of(usage: Any) -> Usage | None:
    """Anthropic's usage object as the gateway's ``Usage``; None when its input or
    output is unreadable. A cache figure that is not a count is 0, named in
    ``cache_anomaly`` (``core.usage.cache_count``, as every backend reads one)."""
    if (not isinstance(usage, dict) or usage.get("input_tokens") is None
            or usage.get("output_tokens") is None):
        return None
    plain, output = _count(usage["input_tokens"]), _count(usage["output_tokens"])
    if plain is None or output is None:
        return None
    read, wrong = cache_count(usage.get("cache_read_input_tokens"), MAX_REPORTED_TOKENS)
    written, bad = cache_count(usage.get("cache_creation_input_tokens"), MAX_REPORTED_TOKENS)
    # Saturated, the prompt keeps its dearest parts: the uncached, then the writes.
    prompt = min(plain + read + written, MAX_REPORTED_TOKENS)
    written = min(written, prompt - plain)
    hour, odd = _hour_of(usage.get("cache_creation"), written)
    return Usage(prompt, output, cached_tokens=min(read, prompt - plain - written),
                 cache_write_tokens=written, cache_anomaly=wrong or bad or odd,
                 cache_write_1h_tokens=hour)


def _hour_of(split: Any, written: int) -> tuple[int, str | None]:
    """Of ``written`` cache writes, those kept an hour, from ``cache_creation``; a split
    that is not counts adding up to ``written`` is named UNREADABLE (the 1-hour figure
    still read, within ``written``), so that the client is shown the split billed."""
    if split is None:
        return 0, None
    if not isinstance(split, dict):
        return 0, UNREADABLE
    hour, odd = cache_count(split.get("ephemeral_1h_input_tokens"), written)
    five = split.get("ephemeral_5m_input_tokens")
    if odd is None and five is not None:
        minutes, bad = cache_count(five, MAX_REPORTED_TOKENS)
        odd = bad or (UNREADABLE if minutes + hour != written else None)
    return hour, odd


def merged_usage(start: Any, delta: Any) -> dict[str, Any]:
    """A stream's usage: ``message_start``'s, field by field overwritten by the non-null
    fields of the (cumulative) ``message_delta``: never added."""
    merged = dict(start) if isinstance(start, dict) else {}
    if isinstance(delta, dict):
        merged.update({k: v for k, v in delta.items() if v is not None})
    return merged


def usage_json(usage: Usage) -> dict[str, Any]:
    """OpenAI's usage object, the cache's reads and writes in ``prompt_tokens_details``
    (``cache_write_tokens``, and of them ``cache_write_1h_tokens``: the spellings
    ``Usage.from_wire`` reads)."""
    details = {"cached_tokens": usage.cached_tokens,
               "cache_write_tokens": usage.cache_write_tokens}
    if usage.cache_write_1h_tokens:
        details["cache_write_1h_tokens"] = usage.cache_write_1h_tokens
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            "prompt_tokens_details": details}


def tool_call(block: dict[str, Any]) -> dict[str, Any]:
    arguments = block.get("input")
    return {"id": str(block.get("id") or ""), "type": "function",
            "function": {"name": str(block.get("name") or ""),
                         "arguments": orjson.dumps(arguments if arguments is not None else {}
                                                   ).decode()}}


def chat_message(content: Any) -> dict[str, Any]:
    """The assistant message the content blocks make."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use":
            calls.append(tool_call(block))
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thoughts.append(block["thinking"])
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    return message


def to_chat_completion(answer: dict[str, Any], *, model: str, created: int) -> dict[str, Any]:
    """A ``chat.completion`` for a Messages answer (its ``type`` already checked)."""
    usage = usage_of(answer.get("usage"))
    out: dict[str, Any] = {
        "id": str(answer.get("id") or ""), "object": "chat.completion", "created": created,
        "model": model,
        "choices": [{"index": 0, "message": chat_message(answer.get("content")),
                     "finish_reason": finish_reason(answer.get("stop_reason")),
                     "logprobs": None}]}
    if usage is not None:
        out["usage"] = usage_json(usage)
    elif answer.get("usage") is not None:     # sent, unreadable: billing must know it came
        out["usage"] = UNREADABLE_USAGE
    return out

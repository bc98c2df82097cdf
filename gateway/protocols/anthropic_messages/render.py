"""An upstream's ``chat.completion``, rendered as an Anthropic ``message``.

    message = to_message(completion.data, billed_usage, wire, "msg_...")   # pure

    finish_reason "stop"           -> stop_reason "end_turn" (or "stop_sequence", below)
    finish_reason "length"         -> "max_tokens"
    finish_reason "tool_calls"     -> "tool_use" (so is any answer that carries tool calls)
    finish_reason "content_filter" -> "refusal" (so is an answer that is OpenAI's ``refusal``)

The usage is what the team is billed, never the upstream's raw figures:
the prompt's uncached tokens, and the cache's reads and writes apart. OpenAI's
protocol does not say which stop sequence ended an answer: "stop_sequence"
is reported only when the upstream names it (vLLM's ``stop_reason``), else
such an answer reads "end_turn" with ``stop_sequence`` null.
"""

from __future__ import annotations

from random import getrandbits
from typing import Any

import orjson

from core.usage import Usage
from gateway.protocols.anthropic_messages.parse import MessagesWire

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "function_call": "tool_use", "content_filter": "refusal"}
RAW_ARGUMENTS = "_raw_arguments"     # where tool arguments that are not a JSON object go


def new_id(prefix: str) -> str:
    # Unique, not secret: ids name a message or a tool call, they authorise nothing.
    return f"{prefix}_{getrandbits(96):024x}"


def stop_reason(finish: Any, named_stop: Any, wire: MessagesWire, *, called_tools: bool = False,
                refused: bool = False) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) from the upstream's finish_reason (and stop string)."""
    if called_tools:
        return "tool_use", None
    if refused:
        return "refusal", None
    if finish == "stop" and isinstance(named_stop, str) and named_stop in wire.stop_sequences:
        return "stop_sequence", named_stop
    return STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn", None


def usage_block(usage: Usage, *, split: bool = True) -> dict[str, Any]:
    """Anthropic's usage: ``input_tokens`` are the prompt's uncached tokens, the cache's
    reads and writes apart (the three add up to the prompt), and with ``split`` the
    writes by lifetime (``cache_creation``: a message's usage has it, a
    ``message_delta``'s does not, nor a translated stream's provisional ``message_start``)."""
    block: dict[str, Any] = {
        "input_tokens": usage.uncached_tokens, "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cached_tokens}
    if split:
        hour = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
        block["cache_creation"] = {"ephemeral_5m_input_tokens": usage.cache_write_tokens - hour,
                                   "ephemeral_1h_input_tokens": hour}
    return block


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's ``arguments`` (a JSON string) as the object Anthropic's ``input`` is.

    Arguments that are not a JSON object are kept whole under ``_raw_arguments``
    rather than dropped: the client's tool then refuses them, and says why."""
    if not arguments:
        return {}
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str | bytes) else arguments
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: arguments}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):        # some upstreams answer in parts
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return ""


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The text (or OpenAI's ``refusal``, which is text the model said) and tool calls."""
    blocks: list[dict[str, Any]] = []
    text = _text(message.get("content")) or _text(message.get("refusal"))
    if text:
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        blocks.append({"type": "tool_use", "id": call.get("id") or new_id("toolu"),
                       "name": function.get("name") or "",
                       "input": tool_input(function.get("arguments"))})
    return blocks


def first_choice(choices: Any) -> dict[str, Any]:
    """Choice 0: the only one a Messages request asks for (it has no ``n``)."""
    for choice in choices if isinstance(choices, list) else ():
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return {}


def to_message(data: dict[str, Any], usage: Usage, wire: MessagesWire, message_id: str
               ) -> dict[str, Any]:
    choice = first_choice(data.get("choices"))
    message = choice.get("message")
    message = message if isinstance(message, dict) else {}
    blocks = content_blocks(message)
    reason, sequence = stop_reason(
        choice.get("finish_reason"), choice.get("stop_reason"), wire,
        called_tools=any(b["type"] == "tool_use" for b in blocks),
        refused=bool(message.get("refusal")) and not message.get("content"))
    return {"id": message_id, "type": "message", "role": "assistant",
            "model": data.get("model") or wire.model, "content": blocks,
            "stop_reason": reason, "stop_sequence": sequence, "usage": usage_block(usage)}

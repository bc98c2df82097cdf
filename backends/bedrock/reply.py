"""Bedrock Converse answer -> OpenAI chat answer, whole or streamed: pure, no I/O.

    usage, wire = read_usage(data["usage"])               # core Usage, and OpenAI's usage object
    chat = from_converse(data, "chatcmpl-1", "model-id", created, structured=None)
    chunks = ChunkTranslator("chatcmpl-1", "model-id", created, None)
    for data in chunks.feed("contentBlockDelta", payload): ...   # chat.completion.chunk dicts

Usage: Bedrock's ``inputTokens`` leaves out the tokens read from and written to
the prompt cache ("total input tokens = inputTokens + cacheReadInputTokens +
cacheWriteInputTokens", AWS's prompt-caching guide), so ``prompt_tokens`` is
their sum, ``cached_tokens`` the reads and ``cache_write_tokens`` the writes,
each billed at its price (``gateway/money/pricing.py``). OpenAI's usage object
carries them as ``prompt_tokens_details.cached_tokens`` and ``.cache_write_tokens``.
A usage whose input or output cannot be read becomes ``core.usage.UNREADABLE_USAGE``
(billing counts for itself, and flags it); a bad cache figure is 0, and flagged.

``stopReason`` -> ``finish_reason``: end_turn and stop_sequence -> stop,
max_tokens and model_context_window_exceeded -> length, tool_use -> tool_calls,
guardrail_intervened and content_filtered -> content_filter. The model's own
malformed output (malformed_model_output, malformed_tool_use) is an upstream
failure, so the ladder can try another model. Under ``structured`` (the forced
tool standing for response_format) that tool's input is the answer's text and
the finish is ``stop``.

Streams: messageStart -> the role chunk; a toolUse contentBlockStart -> a tool
call's first fragment (id, name); contentBlockDelta -> content,
``reasoning_content`` or argument fragments, each tool call numbered by its order
(the pipeline's one accumulator, ``gateway/pipeline/tool_calls.py``, assembles
them); messageStop -> the finish chunk; metadata -> the usage chunk. Unknown
events and members are skipped, as botocore skips them.
"""

from __future__ import annotations

from typing import Any

import orjson

from core.errors import UpstreamError
from core.usage import MAX_REPORTED_TOKENS, UNREADABLE_USAGE, Usage, cache_count

FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
          "model_context_window_exceeded": "length", "tool_use": "tool_calls",
          "guardrail_intervened": "content_filter", "content_filtered": "content_filter"}
MALFORMED = frozenset({"malformed_model_output", "malformed_tool_use"})


def _tokens(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return min(value, MAX_REPORTED_TOKENS)


def read_usage(usage: Any) -> tuple[Usage | None, dict[str, Any] | None]:
    """Bedrock's ``usage`` as the gateway's Usage and OpenAI's usage object; (None, None)
    when it is missing or its input or output is not a count (billing then counts for
    itself). A cache figure that is not a count is 0, named in ``cache_anomaly``
    (``core.usage.cache_count``, as every backend reads one)."""
    if not isinstance(usage, dict):
        return None, None
    fresh, output = _tokens(usage.get("inputTokens")), _tokens(usage.get("outputTokens"))
    if fresh is None or output is None:
        return None, None
    read, wrong = cache_count(usage.get("cacheReadInputTokens"), MAX_REPORTED_TOKENS)
    written, bad = cache_count(usage.get("cacheWriteInputTokens"), MAX_REPORTED_TOKENS)
    # Saturated, the prompt keeps its dearest parts: the uncached, then the writes.
    prompt = min(fresh + read + written, MAX_REPORTED_TOKENS)
    written = min(written, prompt - fresh)
    read = min(read, prompt - fresh - written)
    wire = {"prompt_tokens": prompt, "completion_tokens": output,
            "total_tokens": prompt + output,
            "prompt_tokens_details": {"cached_tokens": read, "cache_write_tokens": written}}
    return Usage(prompt, output, cached_tokens=read, cache_write_tokens=written,
                 cache_anomaly=wrong or bad), wire


def finish_reason(stop: Any, structured: str | None = None) -> str:
    if stop in MALFORMED:
        raise UpstreamError(f"the model's output was malformed ({stop})",
                            code="upstream_malformed_output")
    reason = FINISH.get(stop, "stop") if isinstance(stop, str) else "stop"
    return "stop" if structured and reason == "tool_calls" else reason


def _arguments(value: Any) -> str:
    return orjson.dumps(value if value is not None else {}).decode()


def from_converse(data: dict[str, Any], chat_id: str, model: str, created: int,
                  structured: str | None = None) -> dict[str, Any]:
    """A Converse answer as an OpenAI ``chat.completion``."""
    output = data.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    blocks = message.get("content") if isinstance(message, dict) else None
    if not isinstance(blocks, list):
        raise UpstreamError("the answer has no output message")
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        use = block.get("toolUse")
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(use, dict) and use.get("name") == structured and structured:
            texts.append(_arguments(use.get("input")))
        elif isinstance(use, dict) and isinstance(use.get("name"), str):
            calls.append({"id": str(use.get("toolUseId") or f"call_{len(calls)}"),
                          "type": "function", "function": {
                              "name": use["name"], "arguments": _arguments(use.get("input"))}})
        elif isinstance(block.get("reasoningContent"), dict):
            text = (block["reasoningContent"].get("reasoningText") or {}).get("text")
            if isinstance(text, str):
                reasoning.append(text)
    chat_message: dict[str, Any] = {"role": "assistant",
                                    "content": "".join(texts) if texts or not calls else None}
    if calls:
        chat_message["tool_calls"] = calls
    if reasoning:
        chat_message["reasoning_content"] = "".join(reasoning)
    _, wire = read_usage(data.get("usage"))
    if wire is None and data.get("usage") is not None:   # sent, unreadable: billing flags it
        wire = UNREADABLE_USAGE
    answer: dict[str, Any] = {
        "id": chat_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": chat_message, "logprobs": None,
                     "finish_reason": finish_reason(data.get("stopReason"), structured)}]}
    if wire is not None:
        answer["usage"] = wire
    return answer


class ChunkTranslator:
    """ConverseStream's events, one at a time, as ``chat.completion.chunk`` payloads."""

    def __init__(self, chat_id: str, model: str, created: int,
                 structured: str | None = None) -> None:
        self._base = {"id": chat_id, "object": "chat.completion.chunk", "created": created,
                      "model": model}
        self._structured = structured
        self._tools: dict[int, int] = {}      # contentBlockIndex -> tool call index
        self._answer_blocks: set[int] = set()  # the structured tool's blocks: text
        self.usage: Usage | None = None
        self.stopped = False                  # messageStop came
        self.finished = False                 # metadata came: nothing more is due

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**self._base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                           "finish_reason": finish}]}

    def feed(self, event: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        if event == "messageStart":
            return [self._chunk({"role": "assistant", "content": ""})]
        if event == "contentBlockStart":
            return self._start(payload)
        if event == "contentBlockDelta":
            return self._delta(payload)
        if event == "messageStop":
            self.stopped = True
            return [self._chunk({}, finish_reason(payload.get("stopReason"), self._structured))]
        if event == "metadata":
            self.finished = True
            self.usage, wire = read_usage(payload.get("usage"))
            if wire is None and payload.get("usage") is not None:   # billing flags it
                wire = UNREADABLE_USAGE
            return [] if wire is None else [{**self._base, "choices": [], "usage": wire}]
        return []

    def _start(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        index = payload.get("contentBlockIndex")
        use = (payload.get("start") or {}).get("toolUse")
        if not isinstance(use, dict) or not isinstance(index, int):
            return []
        if self._structured and use.get("name") == self._structured:
            self._answer_blocks.add(index)
            return []
        n = self._tools.setdefault(index, len(self._tools))
        return [self._chunk({"tool_calls": [{
            "index": n, "id": str(use.get("toolUseId") or f"call_{n}"), "type": "function",
            "function": {"name": str(use.get("name") or ""), "arguments": ""}}]})]

    def _delta(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        index, delta = payload.get("contentBlockIndex"), payload.get("delta")
        if not isinstance(delta, dict):
            return []
        if isinstance(delta.get("text"), str):
            return [self._chunk({"content": delta["text"]})] if delta["text"] else []
        use = delta.get("toolUse")
        if isinstance(use, dict) and isinstance(use.get("input"), str) and use["input"]:
            if index in self._answer_blocks:
                return [self._chunk({"content": use["input"]})]
            if isinstance(index, int) and index in self._tools:
                return [self._chunk({"tool_calls": [{"index": self._tools[index], "function": {
                    "arguments": use["input"]}}]})]
        thought = delta.get("reasoningContent")
        if isinstance(thought, dict) and isinstance(thought.get("text"), str) and thought["text"]:
            return [self._chunk({"reasoning_content": thought["text"]})]
        return []

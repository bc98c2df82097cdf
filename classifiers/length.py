"""Token counting for routing: exact with tiktoken, a documented estimate without it.

    counter = TokenCounter("o200k_base")
    counter.count_messages([{"role": "user", "content": "hi"}])   # -> 7

tiktoken cannot download its BPE files on machines without internet, so the
files are looked up in ``TIKTOKEN_CACHE_DIR``. When they are missing the
counter falls back to an estimate of one token per four UTF-8 bytes (OpenAI's
rule of thumb for English; it over-counts code and under-counts CJK text) and
logs one warning per process, never per request: the first encoding that
fails is a warning, any other (a model with its own ``tokenizer``) only a
debug line, since the fix, ``TIKTOKEN_CACHE_DIR``, is the same. With
``routegate serve --workers N`` each worker is a process and warns once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from classifiers.images import OPENAI, image_tokens

logger = logging.getLogger("routegate.length")

# OpenAI's chat format costs a few tokens per message beyond the text itself.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_REPLY = 3
TOKENS_PER_TOOL_CALL = 7      # the call's id, type and JSON framing
BYTES_PER_TOKEN_ESTIMATE = 4

_encoders: dict[str, Any] = {}
_warned: set[str] = set()
_lock = threading.Lock()


def _load_encoder(encoding: str) -> Any | None:
    """Return a tiktoken encoder, or None (after one warning) when it cannot load."""
    with _lock:
        if encoding in _encoders:
            return _encoders[encoding]
        try:
            import tiktoken

            enc = tiktoken.get_encoding(encoding)
        except Exception as exc:  # missing files, no network, unknown name
            enc = None
            # One warning per process; a second encoding would only repeat its advice.
            logger.log(logging.DEBUG if _warned else logging.WARNING,
                       "tiktoken encoding %s unavailable (%s); estimating tokens as "
                       "UTF-8 bytes / %d. Set TIKTOKEN_CACHE_DIR for exact counts.",
                       encoding, type(exc).__name__, BYTES_PER_TOKEN_ESTIMATE)
            _warned.add(encoding)
        _encoders[encoding] = enc
        return enc


def message_text(content: Any) -> str:
    """Flatten an OpenAI message ``content`` (string or list of parts) to text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


class TokenCounter:
    """Counts tokens of text and chat messages for one encoding."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        self.encoding = encoding
        self._encoder = _load_encoder(encoding)

    @property
    def exact(self) -> bool:
        return self._encoder is not None

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        if self._encoder is not None:
            # disallowed_special=() : user text may contain "<|endoftext|>" literally.
            return len(self._encoder.encode(text, disallowed_special=()))
        return max(1, len(text.encode("utf-8")) // BYTES_PER_TOKEN_ESTIMATE)

    def count_messages(self, messages: Iterable[Mapping[str, Any]], image_rule: str = OPENAI
                       ) -> int:
        """A chat prompt as the model reads it: each message's text (string or parts),
        its name, tool calls and OpenAI's few tokens around it, and its images by
        ``image_rule`` (``classifiers/images.py``)."""
        total = TOKENS_PER_REPLY
        for message in messages:
            total += TOKENS_PER_MESSAGE
            content = message.get("content")
            if isinstance(content, str):
                total += self.count_text(content)
            elif isinstance(content, list):
                total += self._count_parts(content, image_rule)
            elif content is not None:
                total += self.count_text(str(content))
            name = message.get("name")
            if isinstance(name, str):
                total += self.count_text(name) + 1
            tool_calls = message.get("tool_calls")
            if tool_calls:
                total += self.count_tool_calls(tool_calls)
        return total

    def _count_parts(self, parts: list[Any], image_rule: str) -> int:
        texts, images = [], 0
        for part in parts:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
                image = part.get("image_url")
                if isinstance(image, Mapping) and isinstance(image.get("url"), str):
                    detail = image.get("detail")
                    images += image_tokens(image["url"], detail if isinstance(detail, str)
                                           else "auto", image_rule)
        return self.count_text("\n".join(texts)) + images

    def count_tool_calls(self, calls: Any) -> int:
        """An assistant's tool calls: each function's name and arguments, and a few
        tokens of framing; any other shape as its text."""
        if not isinstance(calls, list):
            return self.count_text(str(calls))
        total = 0
        for call in calls:
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping):
                total += TOKENS_PER_TOOL_CALL + self.count_text(
                    f"{fn.get('name') or ''}{fn.get('arguments') or ''}")
            else:
                total += self.count_text(str(call))
        return total


_counters: dict[str, TokenCounter] = {}


def counter_for(encoding: str = "o200k_base") -> TokenCounter:
    """Shared counter per encoding (encoders are thread-safe and expensive to build)."""
    counter = _counters.get(encoding)
    if counter is None:
        counter = _counters[encoding] = TokenCounter(encoding)
    return counter

"""Prompts of a given token length, built cheaply from synthetic words.

    builder = PromptBuilder()                   # o200k_base, as the demo fleet counts
    messages = builder.messages(1020, request_no=7)              # 1020 prompt tokens
    messages = builder.messages(3000, request_no=8, passages=12) # a RAG prompt

The traces carry token counts, not text. Each prompt is a short unique
header (so that no two requests share a whole prompt) plus a body of
common words whose tiktoken count is checked once per length and cached:
the gateway then counts the same number of prompt tokens the trace gives
(chat framing included: 3 per message plus 3 for the reply).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

CHAT_OVERHEAD_TOKENS = 6      # one user message: 3 for the message, 3 priming the reply
HEADER_TOKENS = 4             # "Request 1234:" and a newline, about
_WORDS = ("time year people way day man thing woman life child world school state family "
          "student group country problem hand part place case week company system program "
          "question work government number night point home water room mother area money "
          "story fact month lot right study book eye job word business issue side kind head "
          "house service friend father power hour game line end member law car city name "
          "team minute idea kid body information back parent face others level office door "
          "health person art war history party result change morning reason research girl "
          "guy moment air teacher force education").split()


def _default_cache_dir() -> None:
    # The tokenizer files ship in ../shared (no downloads here).
    shared = Path(__file__).resolve().parents[2] / "shared" / "tiktoken"
    if shared.is_dir():
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(shared))


class PromptBuilder:
    def __init__(self, encoding: str = "o200k_base", seed: int = 0) -> None:
        import tiktoken

        _default_cache_dir()
        self._enc = tiktoken.get_encoding(encoding)
        rng = random.Random(seed)
        words = [" " + w for w in _WORDS]
        self._stream = [rng.choice(words) for _ in range(4096)]
        self._bodies: dict[int, str] = {}

    def count(self, text: str) -> int:
        return len(self._enc.encode(text, disallowed_special=()))

    def body(self, tokens: int) -> str:
        """Text of exactly ``tokens`` tokens (cached per length)."""
        if tokens <= 0:
            return ""
        text = self._bodies.get(tokens)
        if text is None:
            words = (self._stream * (tokens // len(self._stream) + 1))[:tokens]
            text = "".join(words)
            # Common words are one token each with their space; trim if the BPE merged any.
            while self.count(text) > tokens:
                text = text[: text.rfind(" ")]
            self._bodies[tokens] = text
        return text

    def text(self, tokens: int, *, request_no: int = 0, passages: int = 0) -> str:
        header = f"Request {request_no}:\n"
        body_tokens = max(1, tokens - CHAT_OVERHEAD_TOKENS - self.count(header))
        if passages <= 1:
            return header + self.body(body_tokens)
        # RAG: the question first, then numbered passages of the retrieved context.
        per = max(1, body_tokens // passages - 4)
        parts = [f"[{i + 1}]{self.body(per)}" for i in range(passages)]
        return header + "\n\n".join(parts)

    def messages(self, tokens: int, *, request_no: int = 0, passages: int = 0
                 ) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.text(tokens, request_no=request_no,
                                                      passages=passages)}]

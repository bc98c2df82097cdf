"""The Bedrock test server's own count of a Converse request, and its prompt cache.

    prompt = Prompt.of(body)          # .ids: the prompt as the model reads it, in order
    prompt.points                     # prefix lengths at each cachePoint
    cache = PromptCache(); read, written = cache.use(prompt)

cl100k_base (not the gateway's o200k_base), over what the model reads, in the
order it reads it: tools (each toolSpec's JSON), system, then each message's
role and blocks (text; a toolUse's name and input JSON; a toolResult's content;
an image as ceil(width x height / 750) tokens, Anthropic's rule on Bedrock).

A cachePoint marks a prefix. A prefix of at least ``MIN_CACHED`` tokens that the
cache holds is read from it (the longest one); the rest up to the last
cachePoint is written to it. ``inputTokens`` is what is neither: Bedrock's
accounting, where the three add up to the prompt.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import threading
from array import array
from dataclasses import dataclass, field
from typing import Any

import tiktoken

from tests.providers.azure_count import image_size

ENCODING = tiktoken.get_encoding("cl100k_base")
MIN_CACHED = 1024
IMAGE_TOKEN = 100_000      # the id an image's tokens stand as in the prefix


def _image_ids(image: dict[str, Any]) -> list[int]:
    data = image["source"].get("bytes") or ""
    size = image_size(f"data:image/{image['format']};base64,{data}")
    width, height = size or (512, 512)
    digest = int.from_bytes(hashlib.sha256(base64.b64decode(data)).digest()[:2], "big")
    return [IMAGE_TOKEN + digest] * max(1, math.ceil(width * height / 750))


@dataclass
class Prompt:
    ids: list[int] = field(default_factory=list)
    points: list[int] = field(default_factory=list)

    def _blocks(self, blocks: list[dict[str, Any]]) -> None:
        for block in blocks:
            if "cachePoint" in block:
                self.points.append(len(self.ids))
            elif "text" in block:
                self.ids += ENCODING.encode(block["text"])
            elif "image" in block:
                self.ids += _image_ids(block["image"])
            elif "toolUse" in block:
                use = block["toolUse"]
                self.ids += ENCODING.encode(use["name"] + json.dumps(use["input"]))
            elif "toolResult" in block:
                self._blocks([{"text": json.dumps(part["json"])} if "json" in part else part
                              for part in block["toolResult"]["content"]])

    @classmethod
    def of(cls, body: dict[str, Any]) -> Prompt:
        prompt = cls()
        for tool in (body.get("toolConfig") or {}).get("tools", []):
            if "cachePoint" in tool:
                prompt.points.append(len(prompt.ids))
            else:
                prompt.ids += ENCODING.encode(json.dumps(tool["toolSpec"]))
        prompt._blocks(body.get("system") or [])
        for message in body["messages"]:
            prompt.ids += ENCODING.encode(message["role"])
            prompt._blocks(message["content"])
        return prompt


class PromptCache:
    def __init__(self) -> None:
        self._held: set[bytes] = set()
        self._lock = threading.Lock()

    @staticmethod
    def _key(ids: list[int]) -> bytes:
        return hashlib.sha256(array("I", ids).tobytes()).digest()

    def use(self, prompt: Prompt) -> tuple[int, int]:
        """(tokens read from the cache, tokens written to it) for this prompt."""
        points = [p for p in prompt.points if p >= MIN_CACHED]
        if not points:
            return 0, 0
        with self._lock:
            read = max((p for p in points if self._key(prompt.ids[:p]) in self._held),
                       default=0)
            for p in points:
                self._held.add(self._key(prompt.ids[:p]))
        return read, max(points) - read

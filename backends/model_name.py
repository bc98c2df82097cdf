"""The configured model's name in the answer's body, where the upstream wrote its own id.

    rename = BodyModel.of(model)        # None when the upstream id is the configured name
    body, data = rename.completion(body, data)
    event = rename.event(event)         # one stream chunk

A client that asked for ``small`` (or ``auto``) and got ``"model":
"Qwen/Qwen2.5-7B-Instruct-AWQ"`` cannot tell which configured model answered
without reading a header; batch output lines have no headers at all. The top
level ``model`` is rewritten in the bytes, so the rest of the answer still goes
out byte for byte: a key inside generated text or tool arguments is escaped
(``\\"model\\"``) and never matches. Only when the upstream spaced its JSON
in another way is the body serialized anew.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from backends.sse import SSEEvent
from core.model_config import ModelConfig


@dataclass(frozen=True, slots=True)
class BodyModel:
    wire: str
    name: str
    _pairs: tuple[tuple[bytes, bytes], ...]

    @classmethod
    def of(cls, model: ModelConfig) -> BodyModel | None:
        if model.wire_model == model.name:
            return None
        old, new = orjson.dumps(model.wire_model), orjson.dumps(model.name)
        pairs = tuple((b'"model"' + sep + old, b'"model"' + sep + new) for sep in (b":", b": "))
        return cls(model.wire_model, model.name, pairs)

    def _bytes(self, raw: bytes) -> bytes | None:
        for old, new in self._pairs:
            if old in raw:
                return raw.replace(old, new, 1)
        return None

    def completion(self, body: bytes, data: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
        if data.get("model") != self.wire:
            return body, data
        data["model"] = self.name
        renamed = self._bytes(body)
        return (renamed if renamed is not None else orjson.dumps(data)), data

    def event(self, event: SSEEvent) -> SSEEvent:
        data = event.data
        if data is None or data.get("model") != self.wire:
            return event
        data["model"] = self.name
        renamed = self._bytes(event.raw)
        event.raw = renamed if renamed is not None else b"data: " + orjson.dumps(data) + b"\n\n"
        return event

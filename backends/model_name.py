"""The configured model's name in the answer's body, where the upstream wrote its own id.

    rename = BodyModel.of(model)
    body, data = rename.completion(body, data)
    event = rename.event(event)         # one stream chunk

A client that asked for ``small`` (or ``auto``) and got ``"model":
"Qwen/Qwen2.5-7B-Instruct-AWQ"`` (or, from Azure, the deployment's underlying
``gpt-4o-2024-11-20``) cannot tell which configured model answered
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
    name: str

    @classmethod
    def of(cls, model: ModelConfig) -> BodyModel:
        return cls(model.name)

    def _bytes(self, raw: bytes, old: str) -> bytes | None:
        was, now = orjson.dumps(old), orjson.dumps(self.name)
        for sep in (b":", b": "):
            if b'"model"' + sep + was in raw:
                return raw.replace(b'"model"' + sep + was, b'"model"' + sep + now, 1)
        return None

    def completion(self, body: bytes, data: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
        old = data.get("model")
        if not isinstance(old, str) or old == self.name:
            return body, data
        data["model"] = self.name
        renamed = self._bytes(body, old)
        return (renamed if renamed is not None else orjson.dumps(data)), data

    def event(self, event: SSEEvent) -> SSEEvent:
        data = event.data
        old = data.get("model") if data is not None else None
        if not isinstance(old, str) or old == self.name:
            return event
        assert data is not None
        data["model"] = self.name
        renamed = self._bytes(event.raw, old)
        event.raw = renamed if renamed is not None else b"data: " + orjson.dumps(data) + b"\n\n"
        return event

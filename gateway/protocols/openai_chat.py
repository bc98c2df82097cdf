"""``POST /v1/chat/completions``: OpenAI chat, the pipeline's own shape.

    CHAT_DOOR.parse / render / error          # the Door the route serves

The body is checked into the pipeline's request (``chat_body.py``) and goes
upstream as it came; the upstream's answer and stream come back byte for
byte (``openai_shape.py``), unless its usage had to be corrected.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gateway.pipeline.request import OFFLOAD_BYTES, ModelRequest, off_loop
from gateway.protocols.chat_body import parse_chat
from gateway.protocols.openai_shape import OpenAIShape

if TYPE_CHECKING:
    from gateway.auth import Caller


class ChatDoor(OpenAIShape):
    name = "chat"

    async def parse(self, raw: bytes, headers: Mapping[str, str], caller: Caller
                    ) -> ModelRequest:
        if len(raw) <= OFFLOAD_BYTES:        # the usual: at once, no coroutine for it
            return parse_chat(raw, headers)
        return await off_loop(raw, parse_chat, raw, headers)


CHAT_DOOR = ChatDoor()

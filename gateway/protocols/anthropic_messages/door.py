"""``POST /v1/messages``: Anthropic's Messages API, through the one pipeline.

    MESSAGES_DOOR.parse(raw, headers, caller)   # Anthropic body -> ModelRequest (a chat body)
    MESSAGES_DOOR.render(req, completion, usage, corrected)   # -> an Anthropic message
    MESSAGES_DOOR.translator(req)               # -> MessagesStream: chat chunks -> Anthropic events
    MESSAGES_DOOR.error(exc)                    # -> (status, Anthropic error body)

e.g. with the official SDK::

    client = anthropic.Anthropic(base_url="http://127.0.0.1:8080", api_key="sk-routegate-demo")
    client.messages.create(model="auto", max_tokens=256,
                           messages=[{"role": "user", "content": "Hello"}])

The key may come as ``x-api-key`` (Anthropic's), ``authorization: Bearer``
or ``api-key``; ``anthropic-version`` and ``anthropic-beta`` are accepted
whatever they say.

Routed to an ``anthropic`` model, the request goes upstream as the client
wrote it (``cache_control``, ``thinking``, documents, citations and all; its
``anthropic-beta`` too) and the answer comes back as Anthropic wrote it
(``native.py``); the chat form still classifies, routes, reserves and
serves any other model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson

from core.errors import GatewayError
from core.usage import Usage
from gateway.pipeline.request import ModelRequest, load_object, off_loop
from gateway.protocols.anthropic_messages.errors import render_error
from gateway.protocols.anthropic_messages.native import MessagesRelay, native_message
from gateway.protocols.anthropic_messages.parse import MessagesWire, messages_request
from gateway.protocols.anthropic_messages.render import new_id, to_message

if TYPE_CHECKING:
    from backends.base import Completion
    from gateway.auth import Caller


def parse_messages(raw: bytes, headers: Mapping[str, str]) -> ModelRequest:
    return messages_request(load_object(raw), headers)


def _wire(req: ModelRequest) -> MessagesWire:
    wire = req.wire
    assert isinstance(wire, MessagesWire), "a request this door did not parse"
    return wire


class MessagesDoor:
    name = "messages"

    async def parse(self, raw: bytes, headers: Mapping[str, str], caller: Caller
                    ) -> ModelRequest:
        return await off_loop(raw, parse_messages, raw, headers)

    async def render(self, req: ModelRequest, completion: Completion, usage: Usage,
                     corrected: bool) -> bytes:
        if completion.native is not None:      # an anthropic upstream's own message
            return native_message(completion.native, usage, corrected)
        # Always the billed usage: the message is built anew, so there is no
        # upstream body to pass through when the figures were not corrected.
        return orjson.dumps(to_message(completion.data, usage, _wire(req), new_id("msg")))

    def translator(self, req: ModelRequest, prompt_tokens: int = 0) -> MessagesRelay:
        return MessagesRelay(_wire(req), prompt_tokens=prompt_tokens)

    def error(self, exc: GatewayError) -> tuple[int, bytes]:
        return render_error(exc)


MESSAGES_DOOR = MessagesDoor()

"""What a protocol adapter (a "door") is: parse its wire request in, render the outcome out.

    door = CHAT_DOOR                                  # or a Responses, Messages, ... door
    req = await door.parse(raw_body, headers, caller)  # -> ModelRequest, or InvalidRequest
    body = await door.render(req, completion, usage)   # a non-streamed answer, in its shape
    translator = door.translator(req)                  # None: relay OpenAI's chunks as they are
    status, body = door.error(exc)                     # any failure, in its error shape

The pipeline (``gateway/pipeline/serve.py``) calls only these; everything
between (classification, routing, pools, budgets, escalation, fallback,
telemetry, the ledger) is the same code for every door. The pipeline reads
OpenAI's protocol, so a door that is not OpenAI chat translates both ways:
its request into an OpenAI body, and the upstream's answer (or stream of
``chat.completion.chunk`` events) into its own. A door may also keep its
request as written (``ModelRequest.native``) for an upstream that speaks its
protocol; that upstream's answer then carries the door's own bytes too
(``Completion.native``, ``NativeEvent``), for the door to pass on as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from core.errors import GatewayError
from core.usage import Usage

if TYPE_CHECKING:
    from backends.base import Completion
    from backends.sse import SSEEvent
    from gateway.auth import Caller
    from gateway.pipeline.request import ModelRequest


class StreamTranslator(Protocol):
    """Turns one upstream stream of OpenAI chunks into a door's own events.

    Pure but for ``finish``, which may store the result (a stored response)
    before its last event goes out, so a client that chains on it at once
    finds it."""

    def feed(self, event: SSEEvent) -> list[bytes]:
        """Wire events for one upstream chunk (never the usage chunk, never [DONE])."""
        ...

    async def finish(self, usage: Usage) -> list[bytes]:
        """The closing events, once the upstream stream ended; ``usage`` is what is billed."""
        ...

    def fail(self, exc: GatewayError) -> list[bytes]:
        """The events that end a stream broken after it began."""
        ...


class Door(Protocol):
    name: str                 # for the request log: "chat", "responses", "messages", ...

    async def parse(self, raw: bytes, headers: Mapping[str, str], caller: Caller
                    ) -> ModelRequest: ...

    async def render(self, req: ModelRequest, completion: Completion, usage: Usage,
                     corrected: bool) -> bytes:
        """The answer's body. ``usage`` is what is billed; ``corrected``: it differs
        from what the upstream reported (the client must see the billed figures)."""
        ...

    def translator(self, req: ModelRequest, prompt_tokens: int = 0) -> StreamTranslator | None:
        """None: relay OpenAI's chunks as they are. ``prompt_tokens``: our count of the
        prompt, for a door whose stream announces it before the upstream's usage comes."""
        ...

    def error(self, exc: GatewayError) -> tuple[int, bytes]:
        """(HTTP status, body) of a failure, in this door's error shape."""
        ...

"""``POST /v1/responses``: OpenAI's Responses API as a door into the one pipeline.

    door = ResponsesDoor(ResponseStore(redis, config))
    req = await door.parse(raw_body, headers, caller)   # a chat ModelRequest; req.wire: ResponsesWire
    body = await door.render(req, completion, usage, corrected)   # the response object, stored
    door.translator(req)                                 # ResponsesStream: chat chunks -> events

The body is read once into typed models (``model.py``), refused with a 400
naming the parameter before anything else is done, then becomes an OpenAI
chat body (``parse.translate``) checked by the
chat door's own ``chat_request``, so routing, budgets, escalation on
``text.format``/``tools`` and fallback are the chat path's. A request naming
``previous_response_id`` is the stored conversation (``store.py``, the
caller's team only: another team's id is a 404) followed by its input. The
answer is stored (``store``, true by default) before it is sent, so a client
can chain on it at once. Errors are OpenAI's, as on the chat door.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from core.errors import GatewayError, NotFound
from core.usage import Usage
from gateway.pipeline.request import ModelRequest, load_object, off_loop
from gateway.protocols.chat_body import chat_request
from gateway.protocols.openai_responses.model import ResponsesRequest, read_request
from gateway.protocols.openai_responses.parse import ResponsesWire, translate
from gateway.protocols.openai_responses.render import assistant_message, completed_response
from gateway.protocols.openai_responses.store import ResponseStore
from gateway.protocols.openai_responses.stream import ResponsesStream

if TYPE_CHECKING:
    from backends.base import Completion
    from gateway.auth import Caller


def new_response_id() -> str:
    # Unguessable, though a guess would only find the guesser's own team's responses.
    return f"resp_{secrets.token_hex(24)}"


def not_found(response_id: str, *, previous: bool = False) -> NotFound:
    if previous:
        return NotFound(f"Previous response with id '{response_id}' not found.",
                        param="previous_response_id", code="previous_response_not_found")
    return NotFound(f"Response with id '{response_id}' not found.")


def _read(raw: bytes) -> tuple[dict[str, Any], ResponsesRequest]:
    body = load_object(raw)
    return body, read_request(body)


def _request(request: ResponsesRequest, body: dict[str, Any], history: list[dict[str, Any]],
             headers: Mapping[str, str]) -> ModelRequest:
    chat, wire = translate(request, body, history, response_id=new_response_id(),
                           created_at=int(time.time()))
    req = chat_request(chat, headers)
    req.wire = wire
    return req


class ResponsesDoor:
    name = "responses"

    def __init__(self, store: ResponseStore) -> None:
        self.store = store

    async def _history(self, previous: str | None, team: str) -> list[dict[str, Any]]:
        if not previous:
            return []
        record = await self.store.load(team, previous)
        if record is None:
            raise not_found(previous, previous=True)
        return record["messages"]

    async def parse(self, raw: bytes, headers: Mapping[str, str], caller: Caller
                    ) -> ModelRequest:
        body, request = await off_loop(raw, _read, raw)     # refused before any Redis read
        history = await self._history(request.previous_response_id, caller.team.name)
        req = await off_loop(raw, _request, request, body, history, headers)
        req.wire.team = caller.team.name
        if req.wire.store:
            self.store.check_room(req.wire.team)     # a full quota: refused before it runs
        return req

    async def _save(self, wire: ResponsesWire, response: dict[str, Any]) -> None:
        if wire.store:
            conversation = [*wire.conversation, assistant_message(response["output"])]
            response["store"] = await self.store.save(wire.team, response, conversation)

    async def render(self, req: ModelRequest, completion: Completion, usage: Usage,
                     corrected: bool) -> bytes:
        # The usage shown is always the billed one: ``corrected`` changes nothing here.
        response = completed_response(req.wire, completion.data, usage, int(time.time()))
        await self._save(req.wire, response)
        return orjson.dumps(response)

    def translator(self, req: ModelRequest, prompt_tokens: int = 0) -> ResponsesStream:
        wire: ResponsesWire = req.wire

        async def save(response: dict[str, Any]) -> None:
            await self._save(wire, response)

        return ResponsesStream(wire, req.model, save=save)

    def error(self, exc: GatewayError) -> tuple[int, bytes]:
        return exc.status_code, exc.to_json()

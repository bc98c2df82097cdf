"""``GET`` and ``DELETE /v1/responses/{id}``: a team's own stored responses.

    client.responses.retrieve("resp_…")     # the response object, as it was answered
    client.responses.delete("resp_…")       # {"id": "resp_…", "object": "response", "deleted": true}

``POST /v1/responses`` itself is a door (``gateway/protocols/openai_responses``),
served in plain ASGI with the chat route. These read the door's store: the
key is the caller's team's, so another team's id is a 404 like an unknown one.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from gateway.deps import State, TeamCaller
from gateway.protocols.openai_responses import RESPONSES_PATH, ResponsesDoor, ResponseStore, not_found
from gateway.routes.json import json_response
from gateway.state import AppState

router = APIRouter()


def response_store(gw: AppState) -> ResponseStore:
    door = gw.doors[RESPONSES_PATH]
    assert isinstance(door, ResponsesDoor)
    return door.store


@router.get("/v1/responses/{response_id}")
async def retrieve_response(response_id: str, gw: State, caller: TeamCaller) -> Response:
    record = await response_store(gw).load(caller.team.name, response_id)
    if record is None:
        raise not_found(response_id)
    return json_response(record["response"])


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, gw: State, caller: TeamCaller) -> Response:
    if not await response_store(gw).delete(caller.team.name, response_id):
        raise not_found(response_id)
    return json_response({"id": response_id, "object": "response", "deleted": True})

"""``/admin``: every team's spend and remaining budget, and run-time limit changes.

    GET    /admin/teams                      all teams: limits, spend today / this month
    GET    /admin/teams/{team}               one team's full report with its ledger
    PUT    /admin/teams/{team}/limits        override limits (JSON Limits), ?key=<key id>
    DELETE /admin/teams/{team}/limits        back to the config's limits
    POST   /admin/reload                     re-read the config file's teams and budgets

Overrides live in Redis, so a change made through one replica applies on all
of them at the next request.
"""

from __future__ import annotations

import asyncio

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from budget import Limits
from core.errors import InvalidRequest, MalformedJSON, NotFound
from gateway.auth import Caller
from gateway.deps import Admin, State
from gateway.reload import reload_teams
from gateway.routes.json import json_response
from gateway.state import AppState

router = APIRouter(prefix="/admin")


def _team(gw: AppState, name: str, key: str | None = None) -> Caller:
    """Any caller of the team; with ``key``, check that the team has that key id,
    since an override stored under a key id nobody uses would silently do nothing."""
    caller = gw.keyring.team(name)
    if caller is None:
        raise NotFound(f"No team named {name!r}.", param="team")
    if key is not None and key not in {Caller(caller.team, k).key_id
                                       for k in caller.team.key_configs()}:
        raise NotFound(f"Team {name!r} has no key named {key!r}.", param="key")
    return caller


@router.get("/teams")
async def list_teams(gw: State, _: Admin) -> Response:
    teams = gw.config.teams
    reports = await asyncio.gather(*(gw.budget.usage(t.name, t.budget, days=1) for t in teams))
    return json_response({"object": "list", "data": reports})


@router.get("/teams/{team}")
async def show_team(team: str, gw: State, _: Admin, days: int = 31) -> Response:
    caller = _team(gw, team)
    return json_response(await gw.budget.usage(team, caller.team.budget, days=min(max(days, 1), 93)))


@router.put("/teams/{team}/limits")
async def set_limits(team: str, request: Request, gw: State, _: Admin,
                     key: str | None = None) -> Response:
    _team(gw, team, key)
    try:
        # Limits refuses NaN, infinities and amounts past what Redis counts exactly.
        limits = Limits.model_validate(orjson.loads(await request.body()))
    except orjson.JSONDecodeError:
        raise MalformedJSON("The body must be a JSON object of limits.") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidRequest(first["msg"], param=".".join(map(str, first["loc"])) or None) from None
    await gw.budget.set_override(team, limits, key_id=key)
    return json_response({"team": team, "key": key, "override": limits.model_dump(exclude_none=True)})


@router.delete("/teams/{team}/limits")
async def clear_limits(team: str, gw: State, _: Admin, key: str | None = None) -> Response:
    _team(gw, team, key)
    await gw.budget.clear_override(team, key_id=key)
    return json_response({"team": team, "key": key, "override": None})


@router.post("/reload")
async def reload_config(gw: State, _: Admin) -> Response:
    return json_response(await reload_teams(gw))

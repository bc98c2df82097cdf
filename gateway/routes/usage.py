"""``GET /v1/usage``: a team's own spend, remaining budget and ledger, with its own key."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from gateway.deps import State, TeamCaller
from gateway.routes.json import json_response

router = APIRouter()


@router.get("/v1/usage")
async def team_usage(gw: State, caller: TeamCaller, days: int = 31) -> Response:
    report = await gw.budget.usage(caller.team.name, caller.team.budget, days=min(max(days, 1), 93))
    return json_response(report)

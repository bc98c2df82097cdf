"""``POST /v1/feedback``: a team scores one of its own answers, and the router learns from it.

    client.post("/feedback", body={"request_id": "req_…", "score": 0.0}, cast_to=object)
    # {"object": "feedback", "request_id": "req_…", "model": "small", "score": 0.0}

``request_id`` is the ``x-routegate-request-id`` the answer carried; the
score (0: wrong or unusable, 1: right) becomes a label of the model that
answered, on a sketch of that prompt (``labelling/``), for ``routegate learn
--from-traffic``. Only for a team with ``feedback: true`` (403 otherwise,
naming the setting), for ``learning.feedback_window_s`` after the answer
(404 after, as for another team's request), once per request (409 after);
503 when the label store cannot be reached.

An answer sent a moment ago may still be on its way to Redis from the
replica that served it: for an id issued no longer ago than a request may
run (``escalation.deadline_s``) plus ``FRESH_S`` (ids carry their start time,
``gateway/ids.py``), an unknown one is asked again for up to 1.75 s
(``labelling/recorder.py``), and so is one whose request ran longer than
that and was marked as running by the replica serving it; any other is
answered at once. 404s and
409s are misses, counted per team across the replicas: from
``learning.feedback_max_misses`` in ``feedback_miss_window_s`` on, the
team's feedback is 429 until the window ends (``labelling/store.py``).
"""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import Field, field_validator
from redis.exceptions import RedisError

from core.errors import Conflict, NotFound, PermissionDenied, RateLimited, ServiceUnavailable
from core.strict import Strict
from gateway.deps import State, TeamCaller
from gateway.ids import issued_s
from gateway.routes.json import json_response

router = APIRouter()
FRESH_S = 5.0       # an id issued this recently may be on its way to Redis
SKEW_S = 2.0        # ... or a little ahead, from another host's clock


class Feedback(Strict):
    request_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    score: float = Field(ge=0, le=1, allow_inf_nan=False)

    @field_validator("score", mode="before")
    @classmethod
    def _a_json_number(cls, value: object) -> object:
        # pydantic's lax mode reads true as 1.0 and "0.5" as 0.5: a score is a number.
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("score must be a number from 0 to 1")
        return value


def fresh(request_id: str, running_s: float) -> bool:
    """Whether this gateway (any replica, within a clock skew of ``SKEW_S``)
    issued ``request_id`` recently enough for its answer to have ended a moment
    ago: the id is its request's start, and the request may have run for
    ``running_s`` (``escalation.deadline_s``) before it ended."""
    issued = issued_s(request_id)
    return issued is not None and -SKEW_S <= time.time() - issued <= running_s + FRESH_S


@router.post("/v1/feedback")
async def give_feedback(spec: Feedback, gw: State, caller: TeamCaller) -> Response:
    team = caller.team.name
    if not caller.team.feedback:
        raise PermissionDenied(f"Feedback is off for team {team!r}: set `feedback: true` on "
                               "the team in the gateway's config.", code="feedback_disabled")
    if gw.labels is None:
        raise ServiceUnavailable("Labels are off on this gateway (learning.labels: false).",
                                 code="labels_disabled")
    try:
        status, model = await gw.labels.feedback(team, spec.request_id, spec.score,
                                                 wait=fresh(spec.request_id,
                                                            gw.config.escalation.deadline_s))
    except RedisError:
        raise ServiceUnavailable("The label store (Redis) is not answering; try again.",
                                 code="labels_unavailable", headers={"retry-after": "5"}) from None
    if status == "throttled":
        learning = gw.config.learning
        raise RateLimited(f"Team {team!r} sent feedback for {learning.feedback_max_misses} "
                          "unknown or already scored answers within "
                          f"{learning.feedback_miss_window_s} s (learning.feedback_max_misses); "
                          f"try again in {model} s.", code="feedback_misses",
                          headers={"retry-after": model})
    if status == "unknown":
        raise NotFound(f"No answer with request id '{spec.request_id}' takes feedback: it is "
                       "not this team's, or older than learning.feedback_window_s "
                       f"({gw.config.learning.feedback_window_s} s).",
                       param="request_id", code="request_not_found")
    if status == "already":
        raise Conflict(f"Feedback for request '{spec.request_id}' was already given.",
                       param="request_id", code="feedback_exists")
    return json_response({"object": "feedback", "request_id": spec.request_id, "model": model,
                          "score": spec.score})

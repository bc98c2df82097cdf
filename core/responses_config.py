"""The ``responses:`` section of the gateway YAML: stored responses of ``/v1/responses``.

    responses:
      store_ttl_s: 2592000         # a stored response lives 30 days (OpenAI's own retention)
      max_stored_bytes: 2097152    # a larger one is answered but not stored ("store": false)
      max_team_bytes: 268435456    # all of a team's stored responses; then store: true is a 429
      max_team_count: 100000       # the same, counted in responses

A response is stored (``store``, OpenAI's default true) in the gateway's
Redis under the team's hash tag, so only that team can read it, delete it or
chain on it (``previous_response_id``). Each record holds the whole
conversation so far, so a long chain's records grow: ``max_stored_bytes``
keeps any one of them (and a chain's next request) bounded, and
``max_team_bytes`` and ``max_team_count`` all of a team's together: a team at
its quota is refused ``store: true`` (429 ``stored_responses_quota``) until it
deletes some or they expire, and can still send ``store: false``. They live
in ``storage.redis_url`` when set, apart from the budget's counters.
"""

from __future__ import annotations

from pydantic import Field

from core.strict import Strict

DAY_S = 86400


class ResponsesSettings(Strict):
    store_ttl_s: int = Field(default=30 * DAY_S, ge=60, le=400 * DAY_S)
    max_stored_bytes: int = Field(default=2 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    max_team_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    max_team_count: int = Field(default=100_000, ge=1)

"""The ``storage:`` section of the gateway YAML: where bulk data lives, apart from the money.

    storage:
      redis_url: redis://bulk-redis:6379/0    # or env ROUTEGATE_STORAGE_REDIS_URL

Stored responses (``/v1/responses``) and the Batch API's file bytes (with
``batch.blob_store: redis``, or ``auto``) are bulk data: large, and filled
by clients. In the Redis that holds the budget's spend counters, a team
that fills it breaks every team's money (a Redis at ``maxmemory`` refuses
the budget scripts, or evicts the counters). With ``redis_url`` they go to
a Redis of their own; without it they share the budget's Redis, within
their per-team quotas (``responses.max_team_bytes``,
``batch.team_storage_bytes``), and the start-up block says so.
"""

from __future__ import annotations

import os

from core.strict import Strict

STORAGE_REDIS_ENV = "ROUTEGATE_STORAGE_REDIS_URL"


class StorageSettings(Strict):
    redis_url: str | None = None

    @property
    def effective_redis_url(self) -> str | None:
        return os.environ.get(STORAGE_REDIS_ENV) or self.redis_url

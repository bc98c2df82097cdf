"""A team's response cache: ``teams[].response_cache`` (``gateway/pipeline/response_cache.py``).

    teams:
      - name: search
        response_cache: {ttl_s: 600, max_entry_bytes: 262144, max_team_bytes: 67108864}

Off unless a team sets it. Only a deterministic request is answered from it
(``temperature: 0``, or a ``seed``), unless ``any: true``; the key is all the
request sends upstream, its quality target and its pool. A hit makes no
upstream call and is billed ``hit_price_fraction`` of what the original
answer cost (0 by default). Entries live in the bulk Redis
(``storage.redis_url``, else the budget's) within ``max_team_bytes``.
"""

from __future__ import annotations

from pydantic import Field

from core.strict import Strict


class ResponseCacheConfig(Strict):
    ttl_s: int = Field(default=300, ge=1, le=30 * 86400)
    max_entry_bytes: int = Field(default=256 * 1024, ge=1024, le=16 * 1024 * 1024)
    max_team_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    any: bool = False                  # cache answers to sampled requests too
    hit_price_fraction: float = Field(default=0.0, ge=0, le=1)

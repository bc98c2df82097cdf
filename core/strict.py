"""The one base of every config section: unknown keys and non-finite numbers refused.

    class BreakerConfig(Strict):
        cooldown_s: float = 10      # `cooldown_s: .inf` is a config error, not a dead model

It sits at the bottom of ``core`` so that every section module (``core/*_config.py``
and ``core/config.py``) can share it; ``tests/gateway/test_config.py`` walks every
model reachable from ``GatewayConfig`` to check that none skips it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    # allow_inf_nan: a `.inf` limit or price passed validation and then broke
    # every request that did arithmetic with it (and a `.inf` deadline or
    # cooldown silently meant "never").
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def check_http_url(url: str) -> str:
    """An http:// or https:// URL with a host (a config validator's check)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL with a host")
    return url

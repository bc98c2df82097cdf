"""Which pool a live request runs in.

    pool = request_pool(caller, headers)     # "interactive" unless asked and allowed

A request may ask for a pool with ``x-routegate-pool: batch`` (cheaper, no
latency SLO) when its team's ``allowed_pools`` allow it. One that asks for
none runs in its key's ``default_pool``, else its team's, else interactive
(or, for a team not allowed interactive, its first allowed pool). Batch API
lines set their pool themselves.
"""

from __future__ import annotations

from collections.abc import Mapping

from core.config import POOL_NAMES
from core.errors import InvalidRequest, PermissionDenied
from gateway.auth import Caller

POOL_HEADER = "x-routegate-pool"


def request_pool(caller: Caller, headers: Mapping[str, str]) -> str:
    allowed = caller.allowed_pools
    asked = headers.get(POOL_HEADER)
    if asked is None:
        default = caller.default_pool
        if default is not None:
            return default
        return "interactive" if allowed is None or "interactive" in allowed else allowed[0]
    if asked not in POOL_NAMES:
        raise InvalidRequest(f"{POOL_HEADER} must be one of {list(POOL_NAMES)}, got {asked!r}",
                             param=POOL_HEADER)
    if allowed is not None and asked not in allowed:
        raise PermissionDenied(f"Team {caller.team_name!r} may not use the {asked} pool.",
                               param=POOL_HEADER, code="pool_not_allowed")
    return asked

"""Which pool a live request runs in.

    pool = request_pool(caller, headers)     # "interactive" unless asked and allowed

Interactive is the default. A request may ask for the batch pool (cheaper,
no latency SLO) with ``x-routegate-pool: batch`` when its team's
``allowed_pools`` allow it; a team allowed only batch runs there by default.
Batch API lines set their pool themselves.
"""

from __future__ import annotations

from collections.abc import Mapping

from core.config import POOL_NAMES
from core.errors import InvalidRequest, PermissionDenied
from gateway.auth import Caller

POOL_HEADER = "x-routegate-pool"


def request_pool(caller: Caller, headers: Mapping[str, str]) -> str:
    allowed = caller.team.allowed_pools
    asked = headers.get(POOL_HEADER)
    if asked is None:
        return "interactive" if allowed is None or "interactive" in allowed else allowed[0]
    if asked not in POOL_NAMES:
        raise InvalidRequest(f"{POOL_HEADER} must be one of {list(POOL_NAMES)}, got {asked!r}",
                             param=POOL_HEADER)
    if allowed is not None and asked not in allowed:
        raise PermissionDenied(f"Team {caller.team.name!r} may not use the {asked} pool.",
                               param=POOL_HEADER, code="pool_not_allowed")
    return asked

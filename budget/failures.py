"""What a Redis error means for the budget: an outage to ride out, or a bug to quarantine."""

from __future__ import annotations

from redis.exceptions import (
    AskError,
    ClusterError,
    DataError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# Errors that mean "Redis cannot answer now", as opposed to a bug.
REDIS_UNAVAILABLE: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    TimeoutError,
    OSError,
    ClusterError,
    RedisClusterException,
    ReadOnlyError,  # a failover in progress
    OutOfMemoryError,
    TryAgainError,
)


def unreplayable(exc: BaseException) -> bool:
    """An error replaying the same entry again can only repeat (WRONGTYPE, a
    Lua error, an argument Redis refuses), as opposed to an outage."""
    return (isinstance(exc, ResponseError | DataError)
            and not isinstance(exc, (*REDIS_UNAVAILABLE, NoScriptError, AskError)))


# After a failure, requests skip Redis this long (the reconciler's ping ends
# it sooner), so a black-holed Redis costs one timeout, not one per request.
DOWN_BACKOFF_S = 1.0

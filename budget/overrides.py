"""Run-time limit overrides kept in Redis (``T:ovr``), set through /admin.

An override replaces, field by field, the configured limits of a team or of
one of its keys; fields it leaves unset keep their configured value. It is
read by ``reserve.lua`` inside the same atomic call as the checks, so a
change made on one replica applies to the very next request on every
replica, with no cache to invalidate.
"""

from __future__ import annotations

from typing import Any

from budget.keys import KeySpace
from budget.scripts import LIMIT_FIELDS, limit_values, limits_from_values
from core.budget_config import Limits


def _scope(key_id: str | None) -> str:
    return "team" if key_id is None else f"k:{key_id}"


def _fields(key_id: str | None) -> list[str]:
    return [f"{_scope(key_id)}:{f}" for f in LIMIT_FIELDS]


async def set_override(redis: Any, keys: KeySpace, team: str, limits: Limits, key_id: str | None) -> None:
    values = limit_values(limits)
    mapping = {f"{_scope(key_id)}:{f}": v for f, v in values.items()}
    # One MULTI on one key: the old override is never half replaced.
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hdel(keys.override(team), *_fields(key_id))
        if mapping:
            pipe.hset(keys.override(team), mapping=mapping)
        await pipe.execute()


async def clear_override(redis: Any, keys: KeySpace, team: str, key_id: str | None) -> None:
    await redis.hdel(keys.override(team), *_fields(key_id))


async def get_override(redis: Any, keys: KeySpace, team: str, key_id: str | None) -> Limits | None:
    raw = await redis.hmget(keys.override(team), _fields(key_id))
    values = {f: int(v) for f, v in zip(LIMIT_FIELDS, raw, strict=True) if v is not None}
    return limits_from_values(values) if values else None


def merge(config: Limits | None, override: Limits | None) -> Limits | None:
    """The effective limits: the override's set fields over the configured ones."""
    if override is None:
        return config
    base = config.model_dump() if config is not None else {}
    base.update(override.model_dump(exclude_none=True))
    return Limits.model_construct(**base)

"""Fixtures of the budget tests: a unique key prefix on the shared Redis, a clock."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
import redis.asyncio

from budget.pipelined import PipelinedRedis
from budget.store import BudgetStore
from core.budget_config import BudgetSettings

SHARED_REDIS = "redis://127.0.0.1:6379/0"


class FakeClock:
    """An injectable wall clock (epoch seconds) that tests move by hand."""

    def __init__(self, when: str = "2026-11-29T12:00:30", tz: str = "UTC") -> None:
        self.now = datetime.fromisoformat(when).replace(tzinfo=ZoneInfo(tz)).timestamp()

    def __call__(self) -> float:
        return self.now

    def set(self, when: str, tz: str = "UTC") -> None:
        self.now = datetime.fromisoformat(when).replace(tzinfo=ZoneInfo(tz)).timestamp()


@pytest.fixture
def prefix() -> Iterator[str]:
    """A key prefix no other test (or other user of the shared Redis) uses; cleaned up."""
    name = f"rgtest-{uuid.uuid4().hex[:12]}"
    yield name
    client = redis.Redis.from_url(SHARED_REDIS)
    try:
        keys = list(client.scan_iter(match="{" + name + ":*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def pipelined_twin(client: Any) -> PipelinedRedis | None:
    """The lean script client the gateway uses for a single Redis, on the same server."""
    if not isinstance(client, redis.asyncio.Redis):
        return None  # a cluster: scripts run on redis-py's cluster client
    kw = client.connection_pool.connection_kwargs
    if "path" in kw:
        return PipelinedRedis(f"unix://{kw['path']}")
    return PipelinedRedis(f"redis://{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/"
                          f"{kw.get('db', 0)}")


def make_store(
    client: Any,
    prefix: str,
    data_dir: Path,
    *,
    replica: str = "r1",
    clock: Any = None,
    **settings: Any,
) -> BudgetStore:
    kwargs: dict[str, Any] = {"replica_id": replica, "data_dir": data_dir,
                              "scripts_client": pipelined_twin(client)}
    if clock is not None:
        kwargs["clock"] = clock
    return BudgetStore(client, BudgetSettings(key_prefix=prefix, **settings), **kwargs)

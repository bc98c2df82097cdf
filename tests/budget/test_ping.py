"""BudgetStore.ping: an unreachable Redis marks the store down; a bug in the call does not."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from tests.budget.conftest import SHARED_REDIS, make_store
from tests.budget.servers import free_port


def test_ping_live_then_unreachable(prefix: str, tmp_path: Path) -> None:
    async def main() -> None:
        live = redis.asyncio.Redis.from_url(SHARED_REDIS)
        dead = redis.asyncio.Redis(host="127.0.0.1", port=free_port(), socket_timeout=1)
        up, down = make_store(live, prefix, tmp_path / "a"), make_store(dead, prefix, tmp_path / "b")
        try:
            assert await up.ping() is True and not up._suspect_down()
            assert await down.ping() is False
            assert down._suspect_down()       # the outage costs one timeout, not one per request
        finally:
            await up.aclose()
            await down.aclose()

    asyncio.run(main())


def test_a_bug_in_ping_is_logged_not_an_outage(prefix: str, tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(SHARED_REDIS)
        store = make_store(client, prefix, tmp_path)

        async def broken(**kwargs: Any) -> bool:
            raise ValueError("not a Redis failure")

        client.ping = broken  # type: ignore[method-assign]
        try:
            assert await store.ping() is False
            assert not store._suspect_down()  # fail_closed must not 503 every team for a bug
        finally:
            await store.aclose()

    asyncio.run(main())
    assert "ping failed unexpectedly" in caplog.text

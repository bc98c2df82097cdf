"""The scripts on a real 3-master Redis Cluster started on free ports."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from budget.redis_client import open_redis
from core.budget_config import Limits
from core.errors import QuotaExceeded
from tests.budget.conftest import make_store
from tests.budget.servers import RedisClusterNodes

USD = 1_000_000_000
TEAMS = [f"team{i}" for i in range(6)]  # spread over several slots and nodes


async def _exercise(url: str, tmp_path: Path) -> None:
    handles = [await open_redis(url, tmp_path) for _ in range(2)]
    assert all(h.cluster for h in handles)
    stores = [make_store(h.client, "rg", tmp_path, replica=f"r{i}") for i, h in enumerate(handles)]
    limits = Limits(daily_hard_usd=1, rpm=10_000)
    costs: dict[str, int] = dict.fromkeys(TEAMS, 0)

    async def one(i: int) -> None:
        team, store = TEAMS[i % len(TEAMS)], stores[i % 2]
        try:
            res = await store.reserve(
                request_id=f"q{i}",
                team=team,
                team_limits=limits,
                key_id="k",
                key_limits=Limits(rpm=10_000),
                model="m",
                max_cost_nanousd=USD // 10,
                max_tokens=50,
            )
        except QuotaExceeded:
            return
        await store.settle(res, input_tokens=5, output_tokens=5, cost_nanousd=USD // 20)
        costs[team] += USD // 20

    try:
        await asyncio.gather(*(one(i) for i in range(240)))
        for team in TEAMS:
            report = await stores[1].usage(team, limits)
            assert report["spent_today_nanousd"] == costs[team] <= USD
            assert report["ledger"][0]["requests"] == costs[team] // (USD // 20)
            assert report["reserved_usd"] == 0
        await stores[0].set_override(TEAMS[0], Limits(daily_hard_usd=0))
        with pytest.raises(QuotaExceeded):
            await stores[1].reserve(
                request_id="blocked",
                team=TEAMS[0],
                team_limits=limits,
                key_id=None,
                key_limits=None,
                model="m",
                max_cost_nanousd=1,
                max_tokens=1,
            )
        assert await stores[1].get_override(TEAMS[0]) == Limits(daily_hard_usd=0)
        await stores[1].clear_override(TEAMS[0])
        assert await stores[0].ping()
    finally:
        for h in handles:
            await h.close()


def test_scripts_run_on_a_redis_cluster(tmp_path: Path) -> None:
    try:
        cluster = RedisClusterNodes(tmp_path, 3).__enter__()
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        print(f"SKIP: could not create a Redis Cluster: {exc!r}")
        pytest.skip(f"could not create a Redis Cluster: {exc!r}")
    try:
        asyncio.run(_exercise(cluster.url, tmp_path))
    finally:
        cluster.__exit__()

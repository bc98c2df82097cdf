"""Redis killed and restarted under a steady load, with either fail policy.

fail_closed: while Redis is gone, requests get a fast 503 with an OpenAI error
body (never a hang, never a 500); once it is back they are served again, and
settles that could not reach it are replayed from the journal.
fail_open: while Redis is gone each replica serves the team from memory up to
``fail_open_usd_per_replica``; once it is back the journalled spend lands in
Redis, to the nano-dollar.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from budget.nanousd import usd_to_nano
from tests.budget.servers import RedisServer
from tests.e2e.traffic import (
    Outcome,
    client_session,
    is_quota_error,
    outcome_cost,
    prices,
    redis_books,
    send_chat,
    wait_books,
)
from tests.support import Gateway, base_config, run_gateway, run_simulator

CLIENTS = 20
KILL_AT_S = 2.0
RESTART_AT_S = 3.5
LOAD_S = 7.0
# After the restart a replica may skip Redis for its 1 s back-off, and the
# reconciler pings once a second: from then on every request must succeed.
RECOVERED_AFTER_S = 2.5
FAIL_OPEN_CAP_USD = 0.002


@dataclass
class Outage:
    killed: float = 0.0  # time.time() once redis-server was dead
    restarting: float = 0.0  # just before it was started again


async def steady_load(gw: Gateway, server: RedisServer) -> tuple[list[Outcome], Outage]:
    """CLIENTS closed-loop clients for LOAD_S seconds; Redis dies and comes back mid-way."""
    outcomes: list[Outcome] = []
    outage = Outage()
    t0 = time.monotonic()

    async def client(n: int) -> None:
        async with client_session(connections=1) as session:
            while time.monotonic() - t0 < LOAD_S:
                outcomes.append(await send_chat(session, gw.base_url, stream=n % 2 == 1,
                                                timeout_s=10))

    async def break_redis() -> None:
        await asyncio.sleep(KILL_AT_S)
        await asyncio.to_thread(server.kill)
        outage.killed = time.time()
        await asyncio.sleep(RESTART_AT_S - KILL_AT_S)
        outage.restarting = time.time()
        await asyncio.to_thread(server.start)

    await asyncio.gather(break_redis(), *(client(n) for n in range(CLIENTS)))
    return outcomes, outage


def wait_journal_drained(directory: Path, timeout_s: float = 5.0) -> list[Path]:
    """Journal files still holding spend (a replay deletes its file once applied)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [p for p in directory.glob("*") if p.exists() and p.stat().st_size > 0]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def run_with_outage(tmp_path: Path, **budget: object) -> tuple[list[Outcome], Outage, dict, int]:
    """Returns the outcomes, the outage, the config and the spend Redis finally holds."""
    with RedisServer(tmp_path / "redis") as server, \
            run_simulator("--tpot-ms", "1", "--prefill", "1000000", "--output-mean", "20") as sim:
        config = base_config(sim, redis_url=server.url + "/0")
        config["budget"].update(budget)
        config["teams"][0]["budget"] = {"daily_hard_usd": 10.0}
        with redis_books(config, server.url) as client, run_gateway(config) as gw:
            outcomes, outage = asyncio.run(steady_load(gw, server))
            assert gw.proc.poll() is None, gw.log()[-3000:]
            expected = sum(outcome_cost(o, prices(config)) for o in outcomes if o.status == 200)
            # Spend that could not reach Redis is replayed by the reconciler (1 s period).
            books = wait_books(client, config, lambda b: b.spent_days == expected, timeout_s=20)
            leftovers = wait_journal_drained(gw.config_path.parent / "data" / "budget-journal")
    by_status: dict[int, int] = {}
    for o in outcomes:
        by_status[o.status] = by_status.get(o.status, 0) + 1
    print(f"\n{budget['fail_policy']}: {len(outcomes)} requests, by status {by_status}, "
          f"Redis down {outage.restarting - outage.killed:.2f} s; recorded spend "
          f"{books.spent_days} nano-USD, served usage cost {expected} nano-USD")
    assert books.spent_days == expected
    assert books.ledger_cost == expected
    assert books.ledger_requests == by_status.get(200, 0)
    assert not leftovers, leftovers
    return outcomes, outage, config, expected


def recovered(outcomes: list[Outcome], outage: Outage) -> list[Outcome]:
    return [o for o in outcomes if o.started > outage.restarting + RECOVERED_AFTER_S]


@pytest.mark.timeout(90)
def test_fail_closed_refuses_with_503_then_recovers(tmp_path: Path) -> None:
    outcomes, outage, _, _ = run_with_outage(tmp_path, fail_policy="fail_closed")
    assert not [o for o in outcomes if o.status not in (200, 503)], \
        [o for o in outcomes if o.status not in (200, 503)][:3]
    refused = [o for o in outcomes if o.status == 503]
    assert refused, "no request noticed the outage"
    for o in refused:
        assert o.error is not None and o.error["type"] == "service_unavailable", o
        assert o.error["code"] == "budget_store_unavailable" and o.error["message"], o
        assert o.ended - o.started < 3, o  # refused fast, not after a hang
    during = [o for o in outcomes if outage.killed < o.started and o.ended < outage.restarting]
    assert during and all(o.status == 503 for o in during)
    after = recovered(outcomes, outage)
    assert after and all(o.status == 200 for o in after), [o for o in after if o.status != 200][:3]


@pytest.mark.timeout(90)
def test_fail_open_serves_under_the_cap_and_reconciles(tmp_path: Path) -> None:
    outcomes, outage, config, _ = run_with_outage(
        tmp_path, fail_policy="fail_open", fail_open_usd_per_replica=FAIL_OPEN_CAP_USD,
        fail_open_rpm_per_replica=100_000)
    assert not [o for o in outcomes if o.status not in (200, 429)], \
        [o for o in outcomes if o.status not in (200, 429)][:3]
    assert all(is_quota_error(o) for o in outcomes if o.status == 429)
    # Started after Redis died and ended before it came back: served from memory only.
    local = [o for o in outcomes if outage.killed < o.started and o.ended < outage.restarting]
    served = [o for o in local if o.status == 200]
    assert served, "nothing was served during the outage"
    local_spend = sum(outcome_cost(o, prices(config)) for o in served)
    print(f"fail_open: {len(served)} of {len(local)} requests during the outage served, "
          f"{local_spend} nano-USD of the {usd_to_nano(FAIL_OPEN_CAP_USD)} cap")
    assert local_spend <= usd_to_nano(FAIL_OPEN_CAP_USD)
    after = recovered(outcomes, outage)
    assert after and all(o.status == 200 for o in after), [o for o in after if o.status != 200][:3]
